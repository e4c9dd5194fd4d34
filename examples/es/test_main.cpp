// SPDX-License-Identifier: BSL-1.0
// Catch2 v2 main for es_core_test.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
