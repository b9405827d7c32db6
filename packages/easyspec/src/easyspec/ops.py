"""Public ops of easyspec: argument checks, autograd functions and backend dispatch."""
