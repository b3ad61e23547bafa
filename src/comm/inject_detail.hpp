#pragma once
// What fault injection shares with the rest of the comm layer.

namespace reprise::detail {

/// Whether `inject::silence_heartbeat` asked this process's heartbeat to keep
/// quiet now.
[[nodiscard]] bool heartbeat_silenced() noexcept;

}  // namespace reprise::detail
