"""Public ops of tfla: argument checks, autograd functions and backend dispatch."""
