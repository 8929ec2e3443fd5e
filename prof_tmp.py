import cProfile
import pstats

from benchmarks import mpi_rows
from devices.mpi import world

c = world()
pr = cProfile.Profile()
orig = mpi_rows._timed


def timed(c, fn):
    pr.enable()
    r = orig(c, fn)
    pr.disable()
    return r


mpi_rows._timed = timed
row = mpi_rows.dp_step_row(c, 5)
if c.rank == 0:
    print(row)
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)
