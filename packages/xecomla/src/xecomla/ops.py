"""Public ops of xecomla: argument checks, autograd functions and backend dispatch."""
