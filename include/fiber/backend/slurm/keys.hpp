// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/slurm/keys.hpp
/// The Slurm backend's configuration keys (slurm.*), registered with
/// fiber's configuration table wherever this header is included.

#include <fiber/backend/detail/named_backends.hpp>

#include <string_view>

namespace fiber::detail {

/// The slurm.* keys, in config_keys_text's form (docs/reference/config.md).
inline constexpr std::string_view slurm_config_keys = R"(
slurm.partition [] sbatch --partition
slurm.account [] sbatch --account
slurm.time_limit [] sbatch --time
slurm.extra_args [] extra sbatch arguments (shell-split)
slurm.launch_mode [auto] auto | sbatch | array | srun
slurm.poll_interval_ms [500] {10..3600000} squeue polling period
)";

/// Registers them, and the name "slurm", during static initialization.
inline const bool slurm_keys_registered = register_backend_keys("slurm", "fiber/backend/slurm.hpp", slurm_config_keys);

} // namespace fiber::detail
