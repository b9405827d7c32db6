"""Public ops of completep: argument checks, autograd functions and backend dispatch."""
