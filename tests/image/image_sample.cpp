// image_sample <file>: writes a small checkpoint image for the tests that read
// it with other HDF5 readers (check_h5py.py with h5py, check_hdf5_tools with
// h5dump and h5ls): a double[3][4] "grid", an int32 array "counts" and the
// bytes "blob", as original rank 2 of 4 at checkpoint 7.

#include <cstdio>
#include <cstring>
#include <fstream>

#include "reprise/image.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: image_sample <file>\n");
    return 2;
  }
  double grid[3][4];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) grid[i][j] = i * 4 + j + 0.5;
  }
  const std::int32_t counts[] = {-3, 0, 7, 2147483647};
  const char blob[] = "reprise image sample";

  reprise::ImageInfo info;
  info.original_rank = reprise::OriginalRank{2};
  info.world_size = 4;
  info.checkpoint_id = 7;
  reprise::ImageBuilder builder(info);
  builder.add_array<double>("grid", std::span<const double>(&grid[0][0], 12), {3, 4});
  builder.add_array<std::int32_t>("counts", counts);
  builder.add("blob", std::as_bytes(std::span(blob, std::strlen(blob))));
  const reprise::ImageBytes image = std::move(builder).finish();

  std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(image.data()), static_cast<std::streamsize>(image.size()));
  if (!out.flush()) {
    std::fprintf(stderr, "image_sample: cannot write %s\n", argv[1]);
    return 1;
  }
  return 0;
}
