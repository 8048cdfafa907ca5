"""The chat's widgets: the prompt, a reply drawn by provenance, the live sidebar, and the line-drawing they share."""
