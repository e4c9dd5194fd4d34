// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/curl_loader.hpp
/// libcurl, opened with dlopen the first time an HTTP backend needs it: the
/// functions fiber calls, as a table of pointers. Internal to fiber.
///
/// Not linked: every program that can choose a backend at run time would
/// otherwise load libcurl and its ~30 dependent libraries into every process
/// it starts, workers included (several ms per start: docs/RATIONALE.md).
/// Opened on demand, only a master that uses the Docker or Kubernetes backend
/// pays, once. The headers are still libcurl's (libcurl4-openssl-dev), so
/// types and constants are checked at compile time.

#include <curl/curl.h>

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace fiber::detail::http {

/// The libcurl functions fiber uses. Obtain with curl_api::get().
struct curl_api {
  decltype(&::curl_global_init) global_init = nullptr;
  decltype(&::curl_version_info) version_info = nullptr;
  decltype(&::curl_easy_init) easy_init = nullptr;
  decltype(&::curl_easy_cleanup) easy_cleanup = nullptr;
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...) = nullptr;
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...) = nullptr;
  decltype(&::curl_easy_strerror) easy_strerror = nullptr;
  decltype(&::curl_multi_init) multi_init = nullptr;
  decltype(&::curl_multi_cleanup) multi_cleanup = nullptr;
  CURLMcode (*multi_setopt)(CURLM*, CURLMoption, ...) = nullptr;
  decltype(&::curl_multi_add_handle) multi_add_handle = nullptr;
  decltype(&::curl_multi_remove_handle) multi_remove_handle = nullptr;
  decltype(&::curl_multi_socket_action) multi_socket_action = nullptr;
  decltype(&::curl_multi_info_read) multi_info_read = nullptr;
  decltype(&::curl_multi_strerror) multi_strerror = nullptr;
  decltype(&::curl_multi_perform) multi_perform = nullptr;
  decltype(&::curl_multi_poll) multi_poll = nullptr;
  decltype(&::curl_slist_append) slist_append = nullptr;
  decltype(&::curl_slist_free_all) slist_free_all = nullptr;
  unsigned version = 0; ///< LIBCURL_VERSION_NUM of the loaded library

  /// The process's table, loaded (and curl_global_init run) on first call;
  /// never unloaded. Any thread. Throws std::runtime_error naming the
  /// library and the Debian package when libcurl cannot be opened, or lacks
  /// a function (older than 7.66).
  static const curl_api& get() {
    static const curl_api api = load();
    return api;
  }

private:
  static curl_api load() {
    void* lib = nullptr;
    std::string why;
    // libcurl4 (OpenSSL) first; the GnuTLS/NSS flavours export the same API.
    for (const char* name : {"libcurl.so.4", "libcurl-gnutls.so.4", "libcurl-nss.so.4", "libcurl.so"}) {
      if ((lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
      if (const char* e = ::dlerror(); e && why.empty()) why = e;
    }
    if (!lib)
      throw std::runtime_error("cannot load libcurl (" + why +
                               "); install the Debian package libcurl4 (libcurl4-openssl-dev to build)");
    curl_api a;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
      if (!fn) throw std::runtime_error(std::string("libcurl lacks ") + name + " (fiber needs libcurl >= 7.66)");
    };
    sym(a.global_init, "curl_global_init");
    sym(a.version_info, "curl_version_info");
    sym(a.easy_init, "curl_easy_init");
    sym(a.easy_cleanup, "curl_easy_cleanup");
    sym(a.easy_setopt, "curl_easy_setopt");
    sym(a.easy_getinfo, "curl_easy_getinfo");
    sym(a.easy_strerror, "curl_easy_strerror");
    sym(a.multi_init, "curl_multi_init");
    sym(a.multi_cleanup, "curl_multi_cleanup");
    sym(a.multi_setopt, "curl_multi_setopt");
    sym(a.multi_add_handle, "curl_multi_add_handle");
    sym(a.multi_remove_handle, "curl_multi_remove_handle");
    sym(a.multi_socket_action, "curl_multi_socket_action");
    sym(a.multi_info_read, "curl_multi_info_read");
    sym(a.multi_strerror, "curl_multi_strerror");
    sym(a.multi_perform, "curl_multi_perform");
    sym(a.multi_poll, "curl_multi_poll");
    sym(a.slist_append, "curl_slist_append");
    sym(a.slist_free_all, "curl_slist_free_all");
    // Once per process; curl_global_cleanup is never called (other users of
    // libcurl in the program may still need it).
    if (a.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("curl_global_init failed");
    a.version = a.version_info(CURLVERSION_NOW)->version_num;
    return a;
  }
};

} // namespace fiber::detail::http
