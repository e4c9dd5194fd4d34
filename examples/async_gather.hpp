// SPDX-License-Identifier: BSL-1.0
#pragma once
// async_gather — "co_await all of them" for a number of operations known only
// at run time, with fiber's completion signature (exception_ptr, R). Used by
// the remote-environment examples.

#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/post.hpp>

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

/// Starts n operations (`launch(i, callback)`, callback(exception_ptr, R))
/// and completes once all have, with their results in order and the first
/// error, if any. Asio 1.22 — the version Debian 12 ships — has
/// make_parallel_group only for a fixed number of operations; this is its
/// ranged form for one signature. The handler runs on its associated executor.
template <class R, class Launch, class Token>
auto async_gather(std::size_t n, Launch launch, Token&& token) {
  return asio::async_initiate<Token, void(std::exception_ptr, std::vector<R>)>(
      [n, launch](auto handler) mutable {
        using H = decltype(handler);
        struct state {
          state(std::size_t n, H h) : out(n), left(n), handler(std::move(h)) {}
          std::mutex m;
          std::vector<R> out;
          std::size_t left;
          std::exception_ptr first;
          H handler;
        };
        auto st = std::make_shared<state>(n, std::move(handler));
        auto finish = [st] {
          auto ex = asio::get_associated_executor(st->handler);
          asio::post(ex, [st] { std::move(st->handler)(st->first, std::move(st->out)); });
        };
        if (n == 0) return finish();
        for (std::size_t i = 0; i < n; ++i)
          launch(i, [st, i, finish](std::exception_ptr e, R r) {
            std::lock_guard lk(st->m);
            if (e && !st->first) st->first = e;
            st->out[i] = std::move(r);
            if (--st->left == 0) finish();
          });
      },
      token);
}
