"""The process model: an orchestrator that never imports solution code, and worker subprocesses."""
