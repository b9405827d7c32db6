"""Public ops of sinkgd: argument checks, autograd functions and backend dispatch."""
