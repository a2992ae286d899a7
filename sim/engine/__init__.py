"""One replica's engine: the SimPy step loop (``replica.py``), the step kernel every step runs
(``step.py``), and fast-forward (``fastforward/``), which applies runs of steps in bulk,
bit-identical to stepping one at a time. The engine asks the allocator only through the
``KvAllocator`` contract."""
