"""The README's quickstart in Python: REPRISE_FAULTS="2@30" kills original rank 2 at step 30."""
import reprise

comm = reprise.Comm.world()
state = reprise.State(total=0)
checkpoint = reprise.Checkpoint(comm)
checkpoint.protect("state", state)
driver = reprise.Driver(comm, checkpoint, mode="shrink", cadence=reprise.Cadence(every_steps=10), inject_faults=True)


def step(s):
    state.total += comm.mpi.allreduce(1)  # mpi4py: the sum over the processes of now


driver.run(100, step)
if comm.rank == 0:
    print(f"{comm.size} of {comm.original_size} processes finished; total {state.total}")
