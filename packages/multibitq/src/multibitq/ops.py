"""Public ops of multibitq: argument checks, autograd functions and backend dispatch."""
