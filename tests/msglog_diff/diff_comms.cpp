// Communicators an application makes (MPI_Comm_dup, MPI_Comm_split, with
// MPI_UNDEFINED too, MPI_Comm_split_type, MPI_Comm_create from a group,
// MPI_Cart_create and MPI_Cart_sub) and messages on them:
// ranks, sizes, comparisons, group translation, wildcard receives, the same
// tag on two communicators kept apart, a collective on each, the largest
// tag MPI_TAG_UB allows, then MPI_Comm_free.

#include <array>

#include "transcript.hpp"

namespace {

using msglog_diff::Transcript;

/// Rank, size, how `comm` compares with MPI_COMM_WORLD, and where its ranks
/// are in MPI_COMM_WORLD.
void describe(Transcript& t, const char* label, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) {
    t.line(label, "null");
    return;
  }
  int rank = 0;
  int size = 0;
  int comparison = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm_compare(MPI_COMM_WORLD, comm, &comparison);
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Group world_group = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(static_cast<std::size_t>(size));
  std::vector<int> in_world(ranks.size());
  for (int i = 0; i < size; ++i) ranks[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(group, size, ranks.data(), world_group, in_world.data());
  std::string members;
  for (const int r : in_world) members += std::to_string(r) + ",";
  t.line(label, "rank", rank, "size", size, "compare", comparison, "world_ranks", members);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
}

/// A ring on `comm`: a message to the next rank received with
/// MPI_ANY_SOURCE and MPI_ANY_TAG, and an allreduce of the world ranks.
void ring(Transcript& t, const char* label, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return;
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto out = msglog_diff::pattern(t.rank() * 7 + size, 9);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Isend(out.data(), 9, MPI_INT, msglog_diff::next_of(rank, size), 5, comm, &request);
  std::array<int, 9> in{};
  auto status = msglog_diff::blank_status();
  MPI_Recv(in.data(), 9, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &status);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
  t.status(label, status, MPI_INT);
  t.bytes("data", in.data(), sizeof(in));
  t.check(status.MPI_SOURCE == msglog_diff::previous_of(rank, size), "the one message on this ring");
  int sum = 0;
  const int mine = t.rank();
  MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, comm);
  t.line(label, "allreduce", sum);
}

/// The same tag on MPI_COMM_WORLD and on `dup`: sent on dup first, received
/// on world first; neither communicator may see the other's message.
void kept_apart(Transcript& t, MPI_Comm dup) {
  const int next = msglog_diff::next_of(t.rank(), t.size());
  const int previous = msglog_diff::previous_of(t.rank(), t.size());
  const int on_dup = 1000 + t.rank();
  const int on_world = 2000 + t.rank();
  std::array<MPI_Request, 2> requests{};
  MPI_Isend(&on_dup, 1, MPI_INT, next, 7, dup, &requests[0]);
  MPI_Isend(&on_world, 1, MPI_INT, next, 7, MPI_COMM_WORLD, &requests[1]);
  int from_world = 0;
  int from_dup = 0;
  MPI_Recv(&from_world, 1, MPI_INT, previous, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Recv(&from_dup, 1, MPI_INT, previous, 7, dup, MPI_STATUS_IGNORE);
  MPI_Waitall(2, requests.data(), MPI_STATUSES_IGNORE);
  t.line("kept_apart", from_world, from_dup);
  t.check(from_world == 2000 + previous && from_dup == 1000 + previous, "each communicator got its own message");
}

/// A message with the largest tag the communicator allows.
void largest_tag(Transcript& t, MPI_Comm comm) {
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &found);
  t.check(found != 0 && *tag_ub >= 32767, "MPI_TAG_UB is at least 32767");
  const int value = t.rank();
  int in = -1;
  auto status = msglog_diff::blank_status();
  MPI_Sendrecv(&value, 1, MPI_INT, msglog_diff::next_of(t.rank(), t.size()), *tag_ub, &in, 1, MPI_INT,
               msglog_diff::previous_of(t.rank(), t.size()), *tag_ub, comm, &status);
  t.line("largest_tag", "received", in, "tag_is_tag_ub", status.MPI_TAG == *tag_ub);
  t.check(status.MPI_TAG == *tag_ub, "the status carries the largest tag");
}

/// Coordinates and the neighbours MPI_Cart_shift names along each
/// dimension, and a value exchanged with them.
void cart_neighbours(Transcript& t, MPI_Comm grid) {
  int rank = 0;
  MPI_Comm_rank(grid, &rank);
  std::array<int, 2> coordinates{};
  MPI_Cart_coords(grid, rank, 2, coordinates.data());
  for (int dimension = 0; dimension < 2; ++dimension) {
    int source = 0;
    int destination = 0;
    MPI_Cart_shift(grid, dimension, 1, &source, &destination);
    const int value = t.rank() * 10 + dimension;
    int received = -1;
    auto status = msglog_diff::blank_status();
    MPI_Sendrecv(&value, 1, MPI_INT, destination, 9, &received, 1, MPI_INT, source, 9, grid, &status);
    t.line("cart_shift", "coordinates", coordinates[0], coordinates[1], "dimension", dimension, "source", source,
           "destination", destination, "received", received);
    t.status("cart_shift", status, MPI_INT);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return msglog_diff::run(argc, argv, 2, [](Transcript& t) {
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    describe(t, "dup", dup);
    ring(t, "dup", dup);
    kept_apart(t, dup);
    largest_tag(t, dup);

    MPI_Comm halves = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, t.rank() % 2, t.size() - t.rank(), &halves);
    describe(t, "split_parity_reversed", halves);
    ring(t, "split_parity_reversed", halves);

    MPI_Comm without_last = MPI_COMM_NULL;
    MPI_Comm_split(dup, t.rank() == t.size() - 1 ? MPI_UNDEFINED : 0, t.rank(), &without_last);
    describe(t, "split_undefined", without_last);
    ring(t, "split_undefined", without_last);
    t.check((without_last == MPI_COMM_NULL) == (t.rank() == t.size() - 1), "MPI_UNDEFINED gives MPI_COMM_NULL");

    MPI_Group world_group = MPI_GROUP_NULL;
    MPI_Group without_first = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    const int first = 0;
    MPI_Group_excl(world_group, 1, &first, &without_first);
    MPI_Comm created = MPI_COMM_NULL;
    MPI_Comm_create(MPI_COMM_WORLD, without_first, &created);
    describe(t, "create_without_first", created);
    ring(t, "create_without_first", created);
    MPI_Group_free(&without_first);
    MPI_Group_free(&world_group);

    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    describe(t, "split_type_shared", node);
    ring(t, "split_type_shared", node);

    // A periodic 2 x (size/2) grid (1 x size for an odd size), its neighbours
    // by MPI_Cart_shift, and its rows by MPI_Cart_sub.
    std::array<int, 2> dims{t.size() % 2 == 0 ? 2 : 1, 0};
    MPI_Dims_create(t.size(), 2, dims.data());
    const std::array<int, 2> periodic{1, 1};
    MPI_Comm grid = MPI_COMM_NULL;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims.data(), periodic.data(), 0, &grid);
    describe(t, "cart", grid);
    cart_neighbours(t, grid);
    const std::array<int, 2> keep_row{0, 1};
    MPI_Comm row = MPI_COMM_NULL;
    MPI_Cart_sub(grid, keep_row.data(), &row);
    describe(t, "cart_sub_row", row);
    ring(t, "cart_sub_row", row);

    MPI_Comm dup_of_split = MPI_COMM_NULL;
    MPI_Comm_dup(halves, &dup_of_split);
    describe(t, "dup_of_split", dup_of_split);
    ring(t, "dup_of_split", dup_of_split);

    for (MPI_Comm* comm : {&dup, &halves, &without_last, &created, &node, &grid, &row, &dup_of_split}) {
      if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
      t.check(*comm == MPI_COMM_NULL, "MPI_Comm_free");
    }
  });
}
