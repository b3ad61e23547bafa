#pragma once
/// \file
/// `Environment`: MPI initialisation and finalisation tied to a scope.

namespace reprise {

/// Initialises MPI (with `MPI_THREAD_MULTIPLE` support requested) on
/// construction and finalises it on destruction. Construct exactly one, first
/// thing in `main`. If MPI is already initialised it does neither.
class Environment {
 public:
  Environment(int& argc, char**& argv);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  /// The thread support level MPI granted (an `MPI_THREAD_*` constant).
  [[nodiscard]] int thread_level() const noexcept { return _thread_level; }

 private:
  bool _owns = false;
  int _thread_level = 0;
};

}  // namespace reprise
