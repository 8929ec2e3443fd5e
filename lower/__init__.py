"""The pipeline: schedule a tensor graph into kernels and copies, lower each kernel, run them."""

from lower.realize import realize, run_schedule
from lower.schedule import ScheduleItem, schedule
from lower.stages import KERNEL_STAGES, lower_kernel

__all__ = ["KERNEL_STAGES", "ScheduleItem", "lower_kernel", "realize", "run_schedule", "schedule"]
