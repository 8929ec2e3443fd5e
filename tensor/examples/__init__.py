"""Runnable examples that need a launcher (`mpirun`), so the README shows them as commands (tests run them)."""
