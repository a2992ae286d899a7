#!/bin/sh
# re-runs this plan (same inputs, seeds and versions give the same table)
kvsim plan $KVSIM_DATA/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv --model llama-3.1-8b --gpu h100,a100-80gb,l40s --tp 1,2 --slo-ttft-p99 1.0 --slo-tpot-p99 0.1 --rate-scale 10 --backend local --workers 2 --out reports/plan-azure-conv
