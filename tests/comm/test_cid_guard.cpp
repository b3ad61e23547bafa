// Open MPI 5.0.11 loses the error of a communicator's creation that meets a
// dead process: MPI_Intercomm_merge and MPI_Intercomm_create then never
// return (docs/RELIABILITY.md, defect 37); and a creation that fails keeps
// Open MPI's turn to pick an index, so that every later creation on a
// communicator of higher index waits forever. With reprise's guard
// (installed by Comm::world), the first return a process failure and the
// turn is given back. Without it, each failure case hangs until the test's
// timeout. A failure learned while a new communicator is activated crashed
// every process that learned it (SIGSEGV in ompi_comm_revoke_local); with
// the guard the creation fails there too, or, on a process that learned it
// only later, a collective on the new communicator does.

#include <gtest/gtest.h>
#include <mpi.h>
// After mpi.h, which it needs.
#include <mpi-ext.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <optional>

#include "reprise/comm.hpp"
#include "reprise/inject.hpp"

using namespace reprise;

namespace {

/// The two halves of the job (the first `size / 2` processes and the rest)
/// and the intercommunicator between them, made over `bridge`.
struct Halves {
  int color = 0;
  MPI_Comm bridge = MPI_COMM_NULL;  ///< a copy of MPI_COMM_WORLD
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm inter = MPI_COMM_NULL;
  int remote_leader = 0;  ///< in `bridge`
};

/// The process that dies as its next activation of a new communicator
/// begins: set on that process alone.
std::optional<OriginalRank> dies_in_activation;
std::atomic<bool> armed = false;
/// Long enough for the other members, which agreed on the new
/// communicator's index with this one, to wait for it in their activation.
constexpr unsigned kActivationReachedUs = 1'000'000;

using Activate = int (*)(void**, void*, void*, const void*, const void*, bool, int);

Halves make_halves(const Comm& comm) {
  Halves halves;
  const int size = comm.size();
  halves.color = comm.rank().value() < size / 2 ? 0 : 1;
  halves.remote_leader = halves.color == 0 ? size / 2 : 0;
  MPI_Comm_dup(MPI_COMM_WORLD, &halves.bridge);
  MPI_Comm_set_errhandler(halves.bridge, MPI_ERRORS_RETURN);
  MPI_Comm_split(halves.bridge, halves.color, comm.rank().value(), &halves.half);
  MPI_Comm_set_errhandler(halves.half, MPI_ERRORS_RETURN);
  MPI_Intercomm_create(halves.half, 0, halves.bridge, halves.remote_leader, 1, &halves.inter);
  MPI_Comm_set_errhandler(halves.inter, MPI_ERRORS_RETURN);
  return halves;
}

void expect_creation_error(const Comm& comm, int rc) {
  ASSERT_NE(rc, MPI_SUCCESS) << "original rank " << comm.original_rank().value() << ": created with a dead member";
  int error_class = MPI_SUCCESS;
  MPI_Error_class(rc, &error_class);
  EXPECT_TRUE(error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_REVOKED || error_class == MPI_ERR_INTERN)
      << "original rank " << comm.original_rank().value() << ": error class " << error_class;
}

/// When the last process dies.
enum class Death {
  kBefore,           ///< before the creation
  kInItsActivation,  ///< once every member agreed on the new communicator's index
};

/// The last process dies; every other one runs `create`, which must fail
/// with a process failure or a revocation (or, where the process dies in
/// the activation, make a communicator whose collectives fail so), not hang
/// or crash.
void expect_creation_fails(Comm& comm, const std::function<int(const Halves&, MPI_Comm&)>& create,
                           Death death = Death::kBefore) {
  const Halves halves = make_halves(comm);
  MPI_Barrier(halves.bridge);
  if (comm.rank().value() == comm.size() - 1) {
    if (death == Death::kBefore) inject::kill_self(comm.original_rank());
    dies_in_activation = comm.original_rank();
    armed = true;
  }
  MPI_Comm created = MPI_COMM_NULL;
  const int rc = create(halves, created);
  if (rc == MPI_SUCCESS && death == Death::kInItsActivation) {
    // ULFM does not promise every member the same outcome: one that did not
    // learn of the death during its activation sees the creation succeed;
    // the new communicator holds the dead process, and a collective on it
    // fails (MPI_ERR_OTHER where it meets the dead process first).
    EXPECT_NE(MPI_Barrier(created), MPI_SUCCESS)
        << "original rank " << comm.original_rank().value() << ": a collective with a dead member worked";
  } else {
    expect_creation_error(comm, rc);
  }
  // The members still inside the creation leave it (as reprise's recovery
  // does): one whose creation failed early leaves its peers waiting for it.
  MPIX_Comm_revoke(halves.bridge);
  MPIX_Comm_revoke(halves.inter);
  MPIX_Comm_revoke(halves.half);
  comm.revoke();
  // Open MPI keeps the failed creation's turn to pick an index; the
  // communicators made after it (a shrink, its duplicates) must not wait.
  Comm healed = comm.shrink();
  EXPECT_EQ(healed.size(), comm.size() - 1);
  const long sum = healed.allreduce(static_cast<long>(healed.original_rank().value()), MPI_SUM);
  EXPECT_EQ(sum, static_cast<long>(comm.size()) * (comm.size() - 1) / 2 - (comm.size() - 1));
}

}  // namespace

/// Open MPI's activation of a new communicator, which `libmpi` calls
/// through its procedure-linkage table, so that this definition (exported
/// by the test) comes first: the armed process dies in it.
extern "C" int ompi_comm_activate(void** created, void* from, void* bridge, const void* first, const void* second,
                                  bool send_first, int mode) {
  // #lizard forgives: Open MPI's signature
  if (armed.exchange(false)) {
    ::usleep(kActivationReachedUs);
    inject::kill_self(*dies_in_activation);
  }
  static const auto original = reinterpret_cast<Activate>(dlsym(RTLD_NEXT, "ompi_comm_activate"));
  return original(created, from, bridge, first, second, send_first, mode);
}

TEST(CidGuard, CreationsWithEveryMemberAliveWork) {
  auto comm = Comm::world();
  Halves halves = make_halves(comm);
  MPI_Comm merged = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Intercomm_merge(halves.inter, halves.color, &merged), MPI_SUCCESS);
  int merged_size = 0;
  MPI_Comm_size(merged, &merged_size);
  EXPECT_EQ(merged_size, comm.size());
  long sum = 0;
  const long mine = comm.rank().value();
  ASSERT_EQ(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, merged), MPI_SUCCESS);
  EXPECT_EQ(sum, static_cast<long>(comm.size()) * (comm.size() - 1) / 2);
  MPI_Comm_free(&merged);
  MPI_Comm_free(&halves.inter);
  MPI_Comm_free(&halves.half);
  MPI_Comm_free(&halves.bridge);
}

TEST(CidGuard, AMergeThatMeetsADeadProcessReturnsAnError) {
  auto comm = Comm::world();
  expect_creation_fails(comm, [](const Halves& halves, MPI_Comm& created) {
    return MPI_Intercomm_merge(halves.inter, halves.color, &created);
  });
}

TEST(CidGuard, AMergeWhoseMemberDiesInItsActivationFailsWithoutACrash) {
  auto comm = Comm::world();
  expect_creation_fails(
      comm,
      [](const Halves& halves, MPI_Comm& created) { return MPI_Intercomm_merge(halves.inter, halves.color, &created); },
      Death::kInItsActivation);
}

TEST(CidGuard, AnIntercommCreateThatMeetsADeadProcessReturnsAnError) {
  auto comm = Comm::world();
  expect_creation_fails(comm, [](const Halves& halves, MPI_Comm& created) {
    return MPI_Intercomm_create(halves.half, 0, halves.bridge, halves.remote_leader, 2, &created);
  });
}

TEST(CidGuard, ACreationThatFailsGivesBackItsTurnToPickAnIndex) {
  auto comm = Comm::world();
  // `later` is made after `first`: its index is higher.
  MPI_Comm first = MPI_COMM_NULL;
  MPI_Comm later = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &first);
  MPI_Comm_dup(MPI_COMM_WORLD, &later);
  MPI_Comm_set_errhandler(first, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(later, MPI_ERRORS_RETURN);
  MPI_Barrier(later);
  if (comm.rank().value() == comm.size() - 1) inject::kill_self(comm.original_rank());
  // Every survivor's copy fails in its index agreement.
  MPI_Comm copy = MPI_COMM_NULL;
  ASSERT_NE(MPI_Comm_dup(first, &copy), MPI_SUCCESS) << "copied a communicator with a dead member";
  MPI_Comm shrunk = MPI_COMM_NULL;
  ASSERT_EQ(MPIX_Comm_shrink(later, &shrunk), MPI_SUCCESS);
  int shrunk_size = 0;
  MPI_Comm_size(shrunk, &shrunk_size);
  EXPECT_EQ(shrunk_size, comm.size() - 1);
  MPI_Comm again = MPI_COMM_NULL;
  ASSERT_EQ(MPI_Comm_dup(shrunk, &again), MPI_SUCCESS);
  const long mine = comm.rank().value();
  long sum = 0;
  ASSERT_EQ(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, again), MPI_SUCCESS);
  EXPECT_EQ(sum, static_cast<long>(comm.size() - 1) * (comm.size() - 2) / 2);
  MPI_Comm_free(&again);
  MPI_Comm_free(&shrunk);
}
