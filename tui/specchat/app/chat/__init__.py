"""The chat column: the log of turns, the token inspector, the prompt, and a reply's life among them."""
