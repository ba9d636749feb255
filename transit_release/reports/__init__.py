"""What the reviewer reads: the internal release report and its figures (drawn in a process of their own),
the words for the passenger-level utility figures, and the dashboard of every release (the index)."""
