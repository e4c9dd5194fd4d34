// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file log.hpp
/// A settable log sink. fiber imposes no logging framework: by default it
/// writes one concise line per record to stderr ("fiber[w3] warning: ..."),
/// and, when the `log_dir` key is set, also to `<log_dir>/<process>.log`
/// (one file per process, as Uber's Fiber did). Route records into your own
/// logger with fiber::set_log_sink. Thread-safety: all functions may be called
/// from any thread; the sink is called under a lock, one record at a time.
/// The default sink never blocks its caller: a thread of its own writes the
/// lines; past 1 MiB queued (a stderr pipe nobody reads) records are dropped
/// and the next line says "fiber: N log records dropped". Queued records are
/// written at exit (at most ~2 s).

#include <fiber/config.hpp>
#include <fiber/detail/log_writer.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <sys/stat.h>

namespace fiber {

/// Severity of a log record, lowest first; `off` as a threshold drops every record.
enum class log_level { debug = 0, info = 1, warning = 2, error = 3, off = 4 };

/// One log record. Views are valid only during the sink call.
struct log_record {
  log_level level;          ///< the record's severity
  std::string_view process; ///< "master", or the worker's name, e.g. "pool-1-w3"
  std::string_view message; ///< the text, without process name, level or newline
};

/// A log destination: called once per record that passes the level, under fiber's log lock.
using log_sink = std::function<void(const log_record&)>;

namespace detail {

inline std::string_view level_name(log_level l) {
  switch (l) {
  case log_level::debug: return "debug";
  case log_level::info: return "info";
  case log_level::warning: return "warning";
  case log_level::error: return "error";
  default: return "off";
  }
}

inline log_level parse_level(std::string_view s) {
  for (int i = 0; i <= 4; ++i)
    if (level_name(static_cast<log_level>(i)) == s) return static_cast<log_level>(i);
  throw config_error("fiber: log_level must be debug|info|warning|error|off, got '" + std::string(s) + "'");
}

class logger {
public:
  static logger& instance() {
    static logger l;
    return l;
  }

  bool enabled(log_level l) {
    std::lock_guard lk(mutex_);
    init_locked();
    return l >= level_;
  }

  void write(log_level l, std::string_view msg) {
    std::lock_guard lk(mutex_);
    init_locked();
    if (l < level_) return;
    log_record r{l, process_, msg};
    if (sink_) {
      sink_(r);
      return;
    }
    auto line = "fiber[" + process_ + "] " + std::string(level_name(l)) + ": " + std::string(msg) + "\n";
    std::string file_line;
    if (file_) {
      auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
      char ts[32];
      std::tm tm{};
      localtime_r(&now, &tm);
      std::strftime(ts, sizeof ts, "%F %T", &tm);
      file_line = std::string(ts) + " " + std::string(level_name(l)) + ": " + std::string(msg) + "\n";
    }
    log_writer::instance().push(std::move(line), std::move(file_line), file_);
  }

  void set_sink(log_sink s) {
    std::lock_guard lk(mutex_);
    sink_ = std::move(s);
  }
  void set_level(log_level l) {
    std::lock_guard lk(mutex_);
    init_locked();
    level_ = l;
  }
  void set_process(std::string name) {
    std::lock_guard lk(mutex_);
    process_ = std::move(name);
    file_.reset();
    inited_ = false;
  }
  std::string process() {
    std::lock_guard lk(mutex_);
    return process_;
  }

private:
  void init_locked() {
    if (inited_) return;
    inited_ = true;
    try {
      if (!level_set_) level_ = parse_level(config_string("log_level"));
      level_set_ = true;
      if (auto dir = config_string("log_dir"); !dir.empty()) {
        ::mkdir(dir.c_str(), 0700);
        if (auto* f = std::fopen((dir + "/" + process_ + ".log").c_str(), "a"))
          file_ = std::shared_ptr<std::FILE>(f, [](std::FILE* p) { std::fclose(p); });
      }
    } catch (const std::exception& e) {
      log_writer::instance().push(std::string("fiber: ") + e.what() + "\n", {}, nullptr);
    }
  }

  std::mutex mutex_;
  bool inited_ = false, level_set_ = false;
  log_level level_ = log_level::warning;
  std::string process_ = "master";
  log_sink sink_;
  std::shared_ptr<std::FILE> file_; // shared with records queued for it
};

inline void append(std::string& s, std::string_view v) { s += v; }
inline void append(std::string& s, const std::string& v) { s += v; }
inline void append(std::string& s, const char* v) { s += v; }
inline void append(std::string& s, char v) { s += v; }
template <class T>
  requires std::is_arithmetic_v<T>
void append(std::string& s, T v) { s += std::to_string(v); }

template <class... Parts>
void log(log_level l, const Parts&... parts) {
  auto& lg = logger::instance();
  if (!lg.enabled(l)) return;
  std::string msg;
  (append(msg, parts), ...);
  lg.write(l, msg);
}

} // namespace detail

/// Replace the default stderr/file sink; pass nullptr to restore it.
inline void set_log_sink(log_sink sink) { detail::logger::instance().set_sink(std::move(sink)); }
/// Records below `level` are dropped (default: the `log_level` key, "warning").
inline void set_log_level(log_level level) { detail::logger::instance().set_level(level); }

} // namespace fiber
