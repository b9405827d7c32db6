"""Public ops of codegemm: argument checks, autograd functions and backend dispatch."""
