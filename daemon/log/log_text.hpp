// Logging for translation units that include LibTorch: its bundled fmt headers shadow the
// system fmt that spdlog was built against, so these files cannot include spdlog. They format
// their own key=value fields and hand the line over.
#pragma once
#include <string>
#include <string_view>

namespace nexus::daemon {

enum class LogLevel { Debug, Info, Warn, Error };
void log_text(LogLevel level, std::string_view event, const std::string& fields);

}  // namespace nexus::daemon
