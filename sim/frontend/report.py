"""What a run's summary says about its API server: whose numbers, how many servers, which endpoint."""

from __future__ import annotations

from sim.config.schema import SimConfig
from sim.frontend.profile import VLLM_API_SERVER, FrontendProfile
from sim.io.api_server import ApiServerInfo


def api_server_info(cfg: SimConfig, profile: FrontendProfile = VLLM_API_SERVER) -> ApiServerInfo:
    if not cfg.api_server_count:
        return ApiServerInfo()
    return ApiServerInfo(profile.name, profile.source, cfg.api_server_count, cfg.endpoint)
