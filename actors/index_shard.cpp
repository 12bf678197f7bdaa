// INDEX SHARD: applies KV events (through RocksDB when persistent) and
// answers which workers hold how much of a prefix.
#include "actors/index_shard.hpp"

#include <algorithm>

#include "core/log.hpp"
#include "storage/block_store.hpp"

namespace kvmesh {

shard_data::~shard_data() = default;

namespace {

using spointer = index_shard_actor::stateful_pointer<index_shard_state>;

}  // namespace

index_shard_actor::behavior_type index_shard(spointer self, uint32_t shard,
                                             std::shared_ptr<shard_data> data,
                                             caf::timespan persist_every) {
  self->state.shard = shard;
  self->state.data = std::move(data);
  self->state.persist_every = persist_every;
  self->state.data->index.for_each([&](uint64_t, uint32_t worker, tier) {
    self->state.workers = std::max(self->state.workers, worker + 1);
  });
  return {
      [=](kv_atom, uint32_t worker, const std::vector<cache_event>& batch) {
        auto& st = self->state;
        status ok_ = kvmesh::ok;
        if (st.data->store) {
          ok_ = st.data->store->apply(worker, batch);
        } else {
          for (const auto& e : batch)
            if (!block_index::valid(worker, e)) {
              ok_ = make_error(ec::invalid_argument, "bad KV event");
              break;
            }
          if (ok_)
            for (const auto& e : batch)
              st.data->index.apply(worker, e);
        }
        if (!ok_) {
          ++st.errors;
          return;
        }
        st.events += batch.size();
        st.workers = std::max(st.workers, worker + 1);
        if (st.data->store && !st.persisting &&
            st.data->store->unpersisted() > 0) {
          st.persisting = true;
          self->delayed_send(self, st.persist_every, persist_atom::value);
        }
      },
      [=](persist_atom) {
        auto& st = self->state;
        st.persisting = false;
        if (!st.data->store) return;
        if (auto p = st.data->store->persist(); !p) {
          // Counted by the store, whose writer retries.
          KVMESH_WARN("index shard %u: %s", st.shard, p.err().message.c_str());
        }
      },
      [=](query_atom,
          const std::vector<uint64_t>& chain) -> std::vector<holder_match> {
        auto& st = self->state;
        st.scratch.resize(st.workers);
        st.data->index.match(chain.data(), chain.size(), st.workers,
                             st.scratch.data());
        std::vector<holder_match> out;
        for (uint32_t w = 0; w < st.workers; ++w) {
          const tier_match& m = st.scratch[w];
          if (m.total() > 0)
            out.push_back(holder_match{w, m.gpu, m.host, m.disk});
        }
        std::stable_sort(out.begin(), out.end(),
                         [](const holder_match& a, const holder_match& b) {
                           return a.gpu + a.host + a.disk >
                                  b.gpu + b.host + b.disk;
                         });
        return out;
      },
      [=](drop_atom, uint32_t worker) {
        auto& st = self->state;
        if (st.data->store) {
          if (!st.data->store->drop_worker(worker)) ++st.errors;
        } else {
          st.data->index.drop_worker(worker);
        }
      },
      [=](status_atom) -> shard_status {
        auto& st = self->state;
        shard_status s;
        s.shard = st.shard;
        s.blocks = st.data->index.blocks();
        s.entries = st.data->index.entries();
        s.events = st.events;
        s.errors = st.errors;
        if (st.data->store) {
          s.disk_bytes = st.data->store->disk_bytes();
          s.errors += st.data->store->errors();
        }
        return s;
      },
  };
}

expected<index_shard_actor> spawn_index_shard(caf::actor_system& sys,
                                              const index_shard_options& opt) {
  auto data = std::make_shared<shard_data>();
  if (!opt.dir.empty()) {
    block_store_options so;
    so.dir = opt.dir;
    so.create = opt.create;
    auto store = block_store::open(so, data->index);
    if (!store) return store.err();
    data->store = std::move(*store);
  }
  return sys.spawn(index_shard, opt.shard, std::move(data), opt.persist_every);
}

}  // namespace kvmesh
