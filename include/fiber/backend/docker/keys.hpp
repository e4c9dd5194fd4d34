// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/docker/keys.hpp
/// The docker backend's configuration keys (docker.*), registered with
/// fiber's configuration table wherever this header is included; from_env
/// includes it, so they exist even where the launcher is not compiled in.

#include <fiber/backend/detail/named_backends.hpp>

#include <string_view>

namespace fiber::detail {

/// The docker.* keys, in config_keys_text's form (docs/reference/config.md).
inline constexpr std::string_view docker_config_keys = R"(
docker.image [] image of the docker backend's containers (docs/backends/docker.md)
docker.mount_binary [true] bind-mount the executable's directory read-only at its own path (the image then needs
    only its libraries)
docker.network [host] container network: host, or a network whose gateway the master binds
docker.user [] user[:group] the containers run as; default: the master's uid:gid; image: the image's
docker.binds [] more bind mounts, comma-separated src:dst[:ro]
docker.labels [] more container labels, comma-separated key=value
)";

/// Registers them, and the name "docker", during static initialization.
inline const bool docker_keys_registered = register_backend_keys("docker", "fiber/backend/docker.hpp",
                                                                 docker_config_keys);

} // namespace fiber::detail
