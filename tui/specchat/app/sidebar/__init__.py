"""The sidebar: the live figures, drawn line by line, and what the chat's sidebar reads from the controller."""
