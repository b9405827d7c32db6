"""Public ops of lrannealing: argument checks, autograd functions and backend dispatch."""
