"""Public ops of qcs: argument checks, autograd functions and backend dispatch."""
