// The common collectives on MPI_COMM_WORLD, each result digested: Barrier,
// Bcast (of a derived datatype too), Reduce and Allreduce (predefined ops,
// MPI_MAXLOC, a user-defined op, MPI_IN_PLACE), Gather(v), Scatter(v),
// Allgather(v), Alltoall(v), Alltoallw, Scan, Exscan, Reduce_scatter(_block),
// and a zero-count Allreduce; with a ring
// of point-to-point messages between them, so that collectives and
// application messages interleave. Reductions use integers and doubles
// whose sums are exact, so the order of a reduction cannot show.

#include <algorithm>
#include <array>

#include "transcript.hpp"

namespace {

using msglog_diff::Transcript;

/// A point-to-point message to the next rank, between collectives.
void ring_step(Transcript& t, int step) {
  const int value = t.rank() * 100 + step;
  int in = -1;
  MPI_Sendrecv(&value, 1, MPI_INT, msglog_diff::next_of(t.rank(), t.size()), step, &in, 1, MPI_INT,
               msglog_diff::previous_of(t.rank(), t.size()), step, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  t.check(in == msglog_diff::previous_of(t.rank(), t.size()) * 100 + step, "ring message");
}

/// The element-wise maximum, as a user-defined (commutative) operation.
void user_max(void* in, void* inout, int* count, MPI_Datatype*) {
  const auto* a = static_cast<const int*>(in);
  auto* b = static_cast<int*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = std::max(a[i], b[i]);
}

void bcasts(Transcript& t) {
  for (int root = 0; root < t.size(); ++root) {
    auto values = root == t.rank() ? msglog_diff::pattern(root + 1, 1000) : std::vector<int>(1000, -1);
    MPI_Bcast(values.data(), 1000, MPI_INT, root, MPI_COMM_WORLD);
    t.bytes("bcast", values.data(), values.size() * sizeof(int));
    t.check(values == msglog_diff::pattern(root + 1, 1000), "bcast data");
  }
  MPI_Datatype every_third = MPI_DATATYPE_NULL;
  MPI_Type_vector(100, 1, 3, MPI_INT, &every_third);
  MPI_Type_commit(&every_third);
  auto strided = t.rank() == 0 ? msglog_diff::pattern(7, 300) : std::vector<int>(300, -1);
  MPI_Bcast(strided.data(), 1, every_third, 0, MPI_COMM_WORLD);
  t.bytes("bcast_vector", strided.data(), strided.size() * sizeof(int));
  MPI_Type_free(&every_third);
  std::array<double, 4> large{};
  if (t.rank() == t.size() - 1) large = {1.5, -2.25, 1e300, 0.0};
  MPI_Bcast(large.data(), 4, MPI_DOUBLE, t.size() - 1, MPI_COMM_WORLD);
  t.bytes("bcast_double", large.data(), sizeof(large));
}

void reductions(Transcript& t) {
  const auto mine = msglog_diff::pattern(t.rank() + 3, 64);
  std::vector<int> result(64, -1);
  for (const MPI_Op op : {MPI_SUM, MPI_MAX, MPI_MIN, MPI_BXOR}) {
    MPI_Reduce(mine.data(), result.data(), 64, MPI_INT, op, 1 % t.size(), MPI_COMM_WORLD);
    if (t.rank() == 1 % t.size()) t.bytes("reduce", result.data(), result.size() * sizeof(int));
    MPI_Allreduce(mine.data(), result.data(), 64, MPI_INT, op, MPI_COMM_WORLD);
    t.bytes("allreduce", result.data(), result.size() * sizeof(int));
  }
  const std::array<double, 2> halves{0.5 * static_cast<double>(t.rank()), 1024.0 + static_cast<double>(t.rank())};
  std::array<double, 2> sums{};
  MPI_Allreduce(halves.data(), sums.data(), 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  t.line("allreduce_double", sums[0], sums[1]);
  const std::array<int, 2> value_and_rank{(t.rank() * 5) % 3, t.rank()};
  std::array<int, 2> maxloc{};
  MPI_Allreduce(value_and_rank.data(), maxloc.data(), 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
  t.line("maxloc", maxloc[0], maxloc[1]);
  MPI_Op op = MPI_OP_NULL;
  MPI_Op_create(user_max, 1, &op);
  MPI_Allreduce(mine.data(), result.data(), 64, MPI_INT, op, MPI_COMM_WORLD);
  t.bytes("allreduce_user_op", result.data(), result.size() * sizeof(int));
  MPI_Op_free(&op);
  result = mine;
  MPI_Allreduce(MPI_IN_PLACE, result.data(), 64, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  t.bytes("allreduce_in_place", result.data(), result.size() * sizeof(int));
  MPI_Allreduce(nullptr, nullptr, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int scan = 0;
  const int one = t.rank() + 1;
  MPI_Scan(&one, &scan, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  t.line("scan", scan);
  t.check(scan == (t.rank() + 1) * (t.rank() + 2) / 2, "scan of 1..rank+1");
  int exscan = -1;
  MPI_Exscan(&one, &exscan, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (t.rank() > 0) t.line("exscan", exscan);  // undefined on process 0

  // Process r gets r + 1 of the sums (Reduce_scatter) or 3 (the _block form).
  const auto size = static_cast<std::size_t>(t.size());
  std::vector<int> counts(size);
  for (std::size_t r = 0; r < size; ++r) counts[r] = static_cast<int>(r) + 1;
  const auto many = msglog_diff::pattern(t.rank() + 5, 3 * size + size * (size + 1) / 2);
  std::vector<int> share(size + 3, -1);
  MPI_Reduce_scatter(many.data(), share.data(), counts.data(), MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  t.bytes("reduce_scatter", share.data(), share.size() * sizeof(int));
  std::fill(share.begin(), share.end(), -1);
  MPI_Reduce_scatter_block(many.data(), share.data(), 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  t.bytes("reduce_scatter_block", share.data(), share.size() * sizeof(int));
}

void gathers_and_scatters(Transcript& t) {
  const int size = t.size();
  const int root = size - 1;
  const auto mine = msglog_diff::pattern(t.rank() + 50, 8);
  std::vector<int> all(8 * static_cast<std::size_t>(size), -1);
  MPI_Gather(mine.data(), 8, MPI_INT, all.data(), 8, MPI_INT, root, MPI_COMM_WORLD);
  if (t.rank() == root) t.bytes("gather", all.data(), all.size() * sizeof(int));
  MPI_Allgather(mine.data(), 8, MPI_INT, all.data(), 8, MPI_INT, MPI_COMM_WORLD);
  t.bytes("allgather", all.data(), all.size() * sizeof(int));

  // Process r gives r + 1 ints; they land in reverse rank order with gaps.
  std::vector<int> counts(static_cast<std::size_t>(size));
  std::vector<int> displacements(static_cast<std::size_t>(size));
  int offset = 0;
  for (int r = size - 1; r >= 0; --r) {
    counts[static_cast<std::size_t>(r)] = r + 1;
    displacements[static_cast<std::size_t>(r)] = offset;
    offset += r + 2;
  }
  std::vector<int> gathered(static_cast<std::size_t>(offset), -1);
  MPI_Gatherv(mine.data(), t.rank() + 1, MPI_INT, gathered.data(), counts.data(), displacements.data(), MPI_INT, 0,
              MPI_COMM_WORLD);
  if (t.rank() == 0) t.bytes("gatherv", gathered.data(), gathered.size() * sizeof(int));
  std::fill(gathered.begin(), gathered.end(), -1);
  MPI_Allgatherv(mine.data(), t.rank() + 1, MPI_INT, gathered.data(), counts.data(), displacements.data(), MPI_INT,
                 MPI_COMM_WORLD);
  t.bytes("allgatherv", gathered.data(), gathered.size() * sizeof(int));

  const auto source = msglog_diff::pattern(60, static_cast<std::size_t>(offset));
  std::vector<int> part(8, -1);
  MPI_Scatter(source.data(), 2, MPI_INT, part.data(), 2, MPI_INT, root, MPI_COMM_WORLD);
  t.bytes("scatter", part.data(), part.size() * sizeof(int));
  std::fill(part.begin(), part.end(), -1);
  MPI_Scatterv(source.data(), counts.data(), displacements.data(), MPI_INT, part.data(), t.rank() + 1, MPI_INT, 0,
               MPI_COMM_WORLD);
  t.bytes("scatterv", part.data(), part.size() * sizeof(int));
}

void all_to_all(Transcript& t) {
  const int size = t.size();
  const auto out = msglog_diff::pattern(t.rank() + 70, 3 * static_cast<std::size_t>(size));
  std::vector<int> in(out.size(), -1);
  MPI_Alltoall(out.data(), 3, MPI_INT, in.data(), 3, MPI_INT, MPI_COMM_WORLD);
  t.bytes("alltoall", in.data(), in.size() * sizeof(int));
  // To process r, this one sends (rank + r) % 3 ints (zero included).
  std::vector<int> send_counts(static_cast<std::size_t>(size));
  std::vector<int> send_displacements(send_counts.size());
  std::vector<int> receive_counts(send_counts.size());
  std::vector<int> receive_displacements(send_counts.size());
  for (int r = 0; r < size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    send_counts[i] = (t.rank() + r) % 3;
    receive_counts[i] = (r + t.rank()) % 3;
    send_displacements[i] = 3 * r;
    receive_displacements[i] = 3 * (size - 1 - r);
  }
  std::fill(in.begin(), in.end(), -1);
  MPI_Alltoallv(out.data(), send_counts.data(), send_displacements.data(), MPI_INT, in.data(), receive_counts.data(),
                receive_displacements.data(), MPI_INT, MPI_COMM_WORLD);
  t.bytes("alltoallv", in.data(), in.size() * sizeof(int));
  // Alltoallw: to process r, one int for even r, a pair of ints (a derived
  // type) for odd r; displacements in bytes.
  MPI_Datatype pair = MPI_DATATYPE_NULL;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  std::vector<MPI_Datatype> send_types(send_counts.size());
  std::vector<MPI_Datatype> receive_types(send_counts.size());
  for (int r = 0; r < size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    send_counts[i] = 1;
    receive_counts[i] = 1;
    send_types[i] = r % 2 == 0 ? MPI_INT : pair;
    receive_types[i] = t.rank() % 2 == 0 ? MPI_INT : pair;
    send_displacements[i] = 3 * r * static_cast<int>(sizeof(int));
    receive_displacements[i] = 3 * r * static_cast<int>(sizeof(int));
  }
  std::fill(in.begin(), in.end(), -1);
  MPI_Alltoallw(out.data(), send_counts.data(), send_displacements.data(), send_types.data(), in.data(),
                receive_counts.data(), receive_displacements.data(), receive_types.data(), MPI_COMM_WORLD);
  t.bytes("alltoallw", in.data(), in.size() * sizeof(int));
  MPI_Type_free(&pair);
}

}  // namespace

int main(int argc, char** argv) {
  return msglog_diff::run(argc, argv, 2, [](Transcript& t) {
    MPI_Barrier(MPI_COMM_WORLD);
    ring_step(t, 1);
    bcasts(t);
    ring_step(t, 2);
    reductions(t);
    ring_step(t, 3);
    gathers_and_scatters(t);
    MPI_Barrier(MPI_COMM_WORLD);
    ring_step(t, 4);
    all_to_all(t);
    ring_step(t, 5);
  });
}
