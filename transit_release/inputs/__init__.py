"""Reading and screening the inputs of every release kind; public universes (never derived from the data)."""
