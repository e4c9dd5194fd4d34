// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/slurm/options.hpp
/// Everything the Slurm launcher is configured with, read from fiber's
/// configuration table (slurm.* keys) and the allocation the master runs in.

#include <fiber/backend/detail/shell_words.hpp>
#include <fiber/backend/slurm/keys.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fiber::detail {

/// Everything the Slurm launcher is configured with. from_config() reads the
/// configuration table; tests and code may build one directly.
struct slurm_options {
  enum class mode { automatic, sbatch, array, srun };

  std::optional<std::string> partition;         ///< --partition (slurm.partition)
  std::optional<std::string> account;           ///< --account (slurm.account)
  std::optional<std::string> time_limit;        ///< --time (slurm.time_limit)
  std::vector<std::string> extra_args;          ///< extra sbatch arguments (slurm.extra_args, shell-split)
  mode launch_mode = mode::automatic;           ///< slurm.launch_mode
  std::chrono::milliseconds poll_interval{500}; ///< slurm.poll_interval_ms
  std::optional<std::string> listen_address;    ///< listen_address
  /// The allocation the master runs in (SLURM_JOB_ID); srun steps go there.
  std::optional<std::string> allocation;
  /// The master itself runs as a job step (SLURM_STEP_ID numeric, e.g. under
  /// `srun ./app`): that step holds the allocation's CPUs, so worker steps
  /// need `--overlap` (with `--exact` alone they would wait forever).
  bool overlap = false;
  /// Directory holding sbatch, squeue, ...; empty: PATH.
  std::string bin_dir;
  /// Bound on one blocking Slurm command (sbatch, scancel, scontrol).
  std::chrono::milliseconds command_timeout{60000};
  /// Warnings (a failed poll, a failed scancel). Default: fiber's log.
  std::function<void(const std::string&)> warn;

  /// Read the configuration table (code > FIBER_* environment > fiber.toml).
  /// Throws fiber::backend_error for a malformed value.
  static slurm_options from_config() {
    slurm_options o;
    auto get = [](std::string_view k) -> std::optional<std::string> {
      auto v = config_get(k);
      if (v && v->empty()) return std::nullopt;
      return v;
    };
    o.partition = get("slurm.partition");
    o.account = get("slurm.account");
    o.time_limit = get("slurm.time_limit");
    if (auto x = get("slurm.extra_args")) {
      try {
        o.extra_args = shell_split(*x);
      } catch (const backend_error& e) {
        throw backend_error(std::string("slurm: slurm.extra_args: ") + e.what());
      }
    }
    o.launch_mode = parse_mode(get("slurm.launch_mode").value_or("auto"));
    if (auto ms = get("slurm.poll_interval_ms")) {
      char* end = nullptr;
      long v = std::strtol(ms->c_str(), &end, 10);
      if (*end || v < 10)
        throw backend_error("slurm: slurm.poll_interval_ms must be an integer >= 10, got '" + *ms + "'");
      o.poll_interval = std::chrono::milliseconds(v);
    }
    o.listen_address = get("listen_address");
    if (const char* j = std::getenv("SLURM_JOB_ID"); j && *j) o.allocation = j;
    if (const char* st = std::getenv("SLURM_STEP_ID"); st && *st)
      o.overlap = std::all_of(st, st + std::strlen(st), [](char c) { return c >= '0' && c <= '9'; });
    return o;
  }

  static mode parse_mode(std::string_view s) {
    if (s == "auto") return mode::automatic;
    if (s == "sbatch") return mode::sbatch;
    if (s == "array") return mode::array;
    if (s == "srun") return mode::srun;
    throw backend_error("slurm: slurm.launch_mode must be auto|sbatch|array|srun, got '" + std::string(s) + "'");
  }

  /// Path of Slurm tool `tool`.
  std::string bin(std::string_view tool) const {
    return bin_dir.empty() ? std::string(tool) : bin_dir + "/" + std::string(tool);
  }
};

} // namespace fiber::detail
