#pragma once
/// \file
/// Naming the public call in an error raised below it: a detail header of
/// the comm layer, for the layers above (not installed).

#include <string_view>

namespace reprise::detail {

/// Inside a `catch`: raises the caught `Error` again, of the same type and
/// with the same details, its message starting with `call` (the public call
/// the user made, e.g. "reprise::Store::load") unless it already does.
[[noreturn]] void rethrow_naming(std::string_view call);

}  // namespace reprise::detail
