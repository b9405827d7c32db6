"""Public ops of ptmoe: argument checks, autograd functions and backend dispatch."""
