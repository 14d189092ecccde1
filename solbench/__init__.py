"""solbench: grade GPU kernels against the speed of light of the hardware."""

__version__ = "0.1.0"
