"""What the machine is doing while models run: memory of the process and of the GPU."""
