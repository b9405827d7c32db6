"""Public ops of flashdp: argument checks, autograd functions and backend dispatch."""
