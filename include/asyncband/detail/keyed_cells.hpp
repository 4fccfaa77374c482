// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/keyed_cells.hpp: a table of once cells by key, shared by its owner and every
// call in progress: the index of once_map and of singleflight::group.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "../once_cell.hpp"
#include "atomic.hpp"

namespace asyncband::detail {

/// What a keyed table does with an entry once its value is in.
enum class on_landing : unsigned char {
  keep,    ///< once_map: the value stays, for later calls
  unlink,  ///< singleflight: the entry leaves the table before anyone is woken
};

/// The entries and their lock. Shared (std::shared_ptr) by the owner and every call's ticket,
/// never reached through the owner: a caller may leave its entry after its call woke others
/// (its run failed and passed on, a late cancellation, a frame destroyed mid-run), or after the
/// landing woke it, and a caller woken so may destroy the owner at once ("last one out").
/// An entry left by its last caller without a value is removed, so failing keys leave nothing
/// behind. Hash, Eq, and K's copy and destruction run under the lock; V never does (values and
/// entries are released after unlocking).
template <class K, class V, class Hash, class Eq, on_landing Landing>
class keyed_cells {
  struct entry {
    explicit entry(const K& k) : key(k) {}
    K key;
    once_cell<V> cell;
    std::size_t callers = 0;  // guarded by the table's lock
  };
  using entry_ptr = std::shared_ptr<entry>;

 public:
  /// A call's membership of an entry (detail::cell_init_op's CellRef).
  class ticket {
   public:
    ticket(std::shared_ptr<keyed_cells> table, entry_ptr joined) noexcept
        : table_(std::move(table)), entry_(std::move(joined)) {}
    ticket(ticket&& other) noexcept = default;
    ticket& operator=(ticket&&) = delete;
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;
    ~ticket() {
      if (table_ != nullptr) table_->leave(*entry_);
    }

    [[nodiscard]] once_cell<V>& get() const noexcept { return entry_->cell; }
    /// The value is in, the gate not yet completed.
    void published() const {
      if constexpr (Landing == on_landing::unlink) table_->unlink_now(*entry_);
    }

   private:
    std::shared_ptr<keyed_cells> table_;
    entry_ptr entry_;
  };

  /// Joins the key's entry, or inserts one. The entry is made outside the lock, and only when
  /// the key has none (a lookup of an existing key allocates nothing).
  static ticket join(const std::shared_ptr<keyed_cells>& self, const K& key) {
    {
      const std::lock_guard lock(self->mutex_);
      if (const auto it = self->entries_.find(key); it != self->entries_.end())
        return admit(self, it->second);
    }
    entry_ptr made = std::make_shared<entry>(key);
    entry_ptr unused;  // released after the lock, if another caller's entry got in first
    const std::lock_guard lock(self->mutex_);
    auto [it, inserted] = self->entries_.try_emplace(key, nullptr);
    if (inserted) {
      it->second = std::move(made);
    } else {
      unused = std::move(made);
    }
    return admit(self, it->second);
  }

  /// Unlinks the key's entry (its callers keep it); true if there was one.
  bool erase(const K& key) { return take(key) != nullptr; }

  /// Unlinks the key's entry and returns a copy of its value, if it has one.
  std::optional<V> remove(const K& key) { return value_of(take(key)); }

  /// A copy of the key's value, if it has one; never waits.
  [[nodiscard]] std::optional<V> get(const K& key) const { return value_of(find(key)); }

  [[nodiscard]] std::size_t size() const {
    const std::lock_guard lock(mutex_);
    return entries_.size();
  }

 private:
  /// Under the lock: one more caller of `e`. A caller of an entry that has its value (a once_map
  /// hit) is not counted and does not hold the table: leaving could not remove the entry, so it
  /// never comes back to the table (one lock per hit, not two).
  static ticket admit(const std::shared_ptr<keyed_cells>& self, const entry_ptr& e) {
    if (e->cell.is_initialized()) return ticket(nullptr, e);
    ++e->callers;
    return ticket(self, e);
  }

  static std::optional<V> value_of(const entry_ptr& e) {
    if (e == nullptr) return std::nullopt;
    const V* value = e->cell.get();
    return value == nullptr ? std::nullopt : std::optional<V>(*value);
  }

  entry_ptr find(const K& key) const {
    const std::lock_guard lock(mutex_);
    const auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : it->second;
  }

  entry_ptr take(const K& key) {
    const std::lock_guard lock(mutex_);
    const auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    entry_ptr e = std::move(it->second);
    entries_.erase(it);
    return e;
  }

  /// The value is in: the entry leaves the table (if erase() has not taken it out already).
  void unlink_now(entry& e) {
    entry_ptr gone;  // released after the lock
    const std::lock_guard lock(mutex_);
    unlink(e, gone);
  }

  /// A caller is done with its entry; the last one out removes an entry left without a value.
  void leave(entry& e) {
    entry_ptr gone;  // released after the lock
    const std::lock_guard lock(mutex_);
    if (--e.callers == 0 && !e.cell.is_initialized()) unlink(e, gone);
  }

  /// Under the lock: removes `e` if its key still maps to it.
  void unlink(entry& e, entry_ptr& gone) {
    const auto it = entries_.find(e.key);
    if (it == entries_.end() || it->second.get() != &e) return;
    gone = std::move(it->second);
    entries_.erase(it);
  }

  mutable asyncband::detail::os_mutex mutex_;
  std::unordered_map<K, entry_ptr, Hash, Eq> entries_;
};

}  // namespace asyncband::detail
