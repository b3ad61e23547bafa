// What scripts/check-settings runs with refused settings and with
// REPRISE_PRINT_SETTINGS: "environment" starts and ends MPI through
// reprise::Environment; "memory" allocates and frees protected memory,
// which starts the write tracker (REPRISE_WRITE_TRAP, REPRISE_WRITTEN_BITS),
// without MPI.

#include <string_view>

#include "reprise/environment.hpp"
#include "reprise/protected_memory.hpp"

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "environment") {
    const reprise::Environment environment(argc, argv);
    return 0;
  }
  if (mode == "memory") {
    void* memory = reprise::protected_alloc(4096);
    reprise::protected_free(memory);
    return 0;
  }
  return 64;
}
