// The static library's users link HDF5 through the installed package: build
// a checkpoint image in memory, open it and read a piece back.
#include <cstdio>
#include <vector>

#include "reprise/image.hpp"

int main() {
  const std::vector<double> values{1.5, 2.5, 3.5};
  reprise::ImageBuilder builder(reprise::ImageInfo{});
  builder.add_array<double>("values", values);
  const reprise::Image image = reprise::Image::open(std::move(builder).finish());
  if (image.read_array<double>("values") != values) return 1;
  std::puts("image_check: an image built and read back through reprise::reprise_static");
  return 0;
}
