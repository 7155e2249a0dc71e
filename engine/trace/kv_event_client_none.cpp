// KvEventClient in a build without ZeroMQ: the browser build (scripts/web.sh), where a page
// cannot open the TCP or IPC sockets a ZeroMQ subscriber needs. Constructing one throws the
// one-line reason; kvscope-ui shows it in its Attach dialog and points to the desktop build.
// Nothing else here is reachable (no client is ever made), and each method says so if it were.
#include "engine/common/error.h"
#include "engine/trace/kv_event_client.h"

namespace kvscope {

struct KvEventClient::Impl {};

namespace {

[[noreturn]] void unreachable(const char* what) {
  throw InternalError(what, "a KvEventClient exists in a build without ZeroMQ");
}

}  // namespace

KvEventClient::KvEventClient(KvAttachConfig config) {
  throw Error(config.endpoint,
              "live attach needs ZeroMQ sockets, which a browser page cannot open: run the "
              "desktop kvscope-ui or `kvscope attach` for it (docs/web.md)");
}

KvEventClient::~KvEventClient() = default;

std::int64_t KvEventClient::poll(int) {
  unreachable("KvEventClient::poll");
}
void KvEventClient::set_batch_limit(std::int64_t) {
  unreachable("KvEventClient::set_batch_limit");
}
bool KvEventClient::batch_limit_reached() const {
  unreachable("KvEventClient::batch_limit_reached");
}
const KvAttachConfig& KvEventClient::config() const {
  unreachable("KvEventClient::config");
}
const KvEventModel& KvEventClient::model() const {
  unreachable("KvEventClient::model");
}
const std::vector<KvRankStats>& KvEventClient::ranks() const {
  unreachable("KvEventClient::ranks");
}
KvRankStats KvEventClient::totals() const {
  unreachable("KvEventClient::totals");
}
KvAttachStatus KvEventClient::status() const {
  unreachable("KvEventClient::status");
}
void KvEventClient::finish_journal() {
  unreachable("KvEventClient::finish_journal");
}

}  // namespace kvscope
