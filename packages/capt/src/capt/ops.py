"""Public ops of capt: argument checks, autograd functions and backend dispatch."""
