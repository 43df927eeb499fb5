#include "daemon/log/log.hpp"
#include "daemon/log/log_text.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/sinks/systemd_sink.h>

#include <cstdlib>
#include <memory>

namespace nexus::daemon {

void init_logging(const std::string& level) {
  std::shared_ptr<spdlog::logger> logger;
  // systemd sets JOURNAL_STREAM when stderr is the journal; then log natively so that each
  // line keeps its priority instead of being re-parsed from text.
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    auto sink = std::make_shared<spdlog::sinks::systemd_sink_mt>("nexusd");
    logger = std::make_shared<spdlog::logger>("nexusd", sink);
    logger->set_pattern("%v");
  } else {
    logger = std::make_shared<spdlog::logger>(
        "nexusd", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ level=%l %v", spdlog::pattern_time_type::utc);
  }
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void log_text(LogLevel level, std::string_view event, const std::string& fields) {
  const auto l = level == LogLevel::Debug  ? spdlog::level::debug
                 : level == LogLevel::Info ? spdlog::level::info
                 : level == LogLevel::Warn ? spdlog::level::warn
                                           : spdlog::level::err;
  spdlog::log(l, "event={} {}", event, fields);
}

}  // namespace nexus::daemon
