"""Applications shipped with LoopKernel; they use the public API only."""
