import reprise

comm = reprise.Comm.world()
state = reprise.State(total=0)  # every checkpoint saves it, a recovery rolls it back
checkpoint = reprise.Checkpoint(comm)
checkpoint.protect("state", state)
driver = reprise.Driver(comm, checkpoint, inject_faults=True)  # kills as REPRISE_FAULTS says ("2@30": #2 at step 30)


def step(s):
    state.total += comm.mpi.allreduce(1)  # mpi4py: the sum over the processes of now


driver.run(100, step)
print(f"process {comm.original_rank}: total {state.total}")
