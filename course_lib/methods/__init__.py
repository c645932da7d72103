"""The five papers' methods, one module each, and the registry that names them."""
