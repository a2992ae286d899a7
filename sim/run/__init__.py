"""Wiring: a config becomes the run's parts once (``build``), one replica replays a trace
(``simulate``), and independent runs go to a local pool or Ray (``executor``)."""
