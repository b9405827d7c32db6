"""Public ops of hpscaling: argument checks, autograd functions and backend dispatch."""
