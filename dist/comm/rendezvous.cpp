#include "dist/comm/rendezvous.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/comm/socket.h"
#include "dist/comm/tcp_store.h"

namespace mt::dist {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

int parse_int(const char* name, const char* text) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  MT_CHECK(errno == 0 && end != text && *end == '\0' && v >= -(1L << 30) && v <= (1L << 30),
           "launch environment: ", name, "=\"", text, "\" is not an integer; the launcher (mintrain "
           "launch, torchrun, srun or mpirun) sets it, so unset it or fix it");
  return static_cast<int>(v);
}

int int_env(const char* name, int fallback) {
  const char* v = env(name);
  return v ? parse_int(name, v) : fallback;
}

// SLURM_TASKS_PER_NODE looks like "4(x2),3": the first node's count is the leading number.
int leading_int(const char* name, const char* text) {
  std::string digits;
  for (const char* p = text; *p >= '0' && *p <= '9'; ++p) digits += *p;
  MT_CHECK(!digits.empty(), "launch environment: cannot read a task count from ", name, "=\"", text, "\"");
  return parse_int(name, digits.c_str());
}

// The first host of a Slurm node list when it is simple: "a,b" -> "a", "node[03-05,9]" ->
// "node03". Anything fancier (several bracket groups) returns "" and the caller asks for
// MASTER_ADDR.
std::string first_slurm_host(const std::string& list) {
  const std::string first = list.substr(0, list.find(','));
  const auto open = list.find('[');
  if (open == std::string::npos) return first;
  if (list.find(',') < open) return first;  // "a,b[1-2]": the first entry is plain
  const auto close = list.find(']', open);
  if (close == std::string::npos || list.find('[', close) != std::string::npos) return "";
  std::string index;
  for (size_t i = open + 1; i < close && list[i] >= '0' && list[i] <= '9'; ++i) index += list[i];
  if (index.empty()) return "";
  return list.substr(0, open) + index;
}

void validate(const WorldInfo& w) {
  const std::string src = " (from the " + w.source + " variables)";
  MT_CHECK(w.world_size >= 1, "launch environment: world size ", w.world_size, " must be at least 1", src);
  MT_CHECK(w.rank >= 0 && w.rank < w.world_size, "launch environment: rank ", w.rank,
           " is outside the world of ", w.world_size, " ranks (0..", w.world_size - 1, ")", src);
  MT_CHECK(w.local_world_size >= 1 && w.local_world_size <= w.world_size,
           "launch environment: local world size ", w.local_world_size, " must be between 1 and the world size ",
           w.world_size, src);
  MT_CHECK(w.local_rank >= 0 && w.local_rank < w.local_world_size, "launch environment: local rank ",
           w.local_rank, " is outside 0..", w.local_world_size - 1, src);
  MT_CHECK(w.master_port >= 1 && w.master_port <= 65535, "launch environment: MASTER_PORT ",
           w.master_port, " is not a TCP port (1..65535)");
  MT_CHECK(!w.master_addr.empty(), "launch environment: empty MASTER_ADDR");
  MT_CHECK(w.servers >= 0 && w.servers < w.world_size, "launch environment: MINTRAIN_NUM_SERVERS=", w.servers,
           " must leave at least one worker in the world of ", w.world_size, " (WORLD_SIZE counts workers and "
           "servers)", src);
}

// MINTRAIN_NUM_SERVERS and MINTRAIN_ROLE: the parameter servers' place in the world.
void read_roles(WorldInfo& w) {
  w.servers = int_env("MINTRAIN_NUM_SERVERS", 0);
  const char* role = env("MINTRAIN_ROLE");
  if (role == nullptr || w.servers < 0 || w.servers >= w.world_size) return;  // validate() names the count
  const std::string r = role;
  MT_CHECK(r == "worker" || r == "server", "launch environment: MINTRAIN_ROLE=\"", r, "\" is neither worker nor "
           "server");
  const std::string by_rank = w.is_server() ? "server" : "worker";
  MT_CHECK(r == by_rank, "launch environment: MINTRAIN_ROLE=", r, " but rank ", w.rank, " of ", w.world_size,
           " with MINTRAIN_NUM_SERVERS=", w.servers, " is a ", by_rank, " (workers are ranks 0..", w.workers() - 1,
           ", servers ", w.workers(), "..", w.world_size - 1, "): give servers the last ranks");
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size() && i < 32; ++i) {
    if (i) out += ", ";
    out += std::to_string(ranks[i]);
  }
  if (ranks.size() > 32) out += " and " + std::to_string(ranks.size() - 32) + " more";
  return out;
}

}  // namespace

WorldInfo world_from_env() {
  WorldInfo w;
  if (env("RANK") || env("WORLD_SIZE")) {
    MT_CHECK(env("RANK") && env("WORLD_SIZE"), "launch environment: ", env("RANK") ? "RANK" : "WORLD_SIZE",
             " is set but ", env("RANK") ? "WORLD_SIZE" : "RANK",
             " is not; set both (mintrain launch and torchrun do)");
    w.source = "torchrun";
    w.rank = parse_int("RANK", env("RANK"));
    w.world_size = parse_int("WORLD_SIZE", env("WORLD_SIZE"));
    // Without LOCAL_* we assume one node (the common hand-written case).
    w.local_rank = int_env("LOCAL_RANK", w.rank);
    w.local_world_size = int_env("LOCAL_WORLD_SIZE", w.world_size);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    w.source = "slurm";
    w.rank = parse_int("SLURM_PROCID", env("SLURM_PROCID"));
    w.world_size = parse_int("SLURM_NTASKS", env("SLURM_NTASKS"));
    w.local_rank = int_env("SLURM_LOCALID", 0);
    const char* per_node = env("SLURM_NTASKS_PER_NODE") ? "SLURM_NTASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    w.local_world_size = env(per_node) ? leading_int(per_node, env(per_node)) : w.local_rank + 1;
    if (!env("MASTER_ADDR")) {
      const char* list = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST")
                         : env("SLURM_JOB_NODELIST") ? env("SLURM_JOB_NODELIST")
                                                     : env("SLURM_NODELIST");
      if (list != nullptr) {
        w.master_addr = first_slurm_host(list);
        MT_CHECK(!w.master_addr.empty(), "launch environment: cannot take the first host of the Slurm "
                 "node list \"", list, "\"; export MASTER_ADDR=$(scontrol show hostnames "
                 "\"$SLURM_JOB_NODELIST\" | head -n 1) before srun");
      } else {
        MT_CHECK(w.world_size == w.local_world_size, "launch environment: Slurm job over several "
                 "nodes without SLURM_NODELIST or MASTER_ADDR; export MASTER_ADDR");
      }
    }
  } else if (env("OMPI_COMM_WORLD_RANK") && env("OMPI_COMM_WORLD_SIZE")) {
    w.source = "mpi";
    w.rank = parse_int("OMPI_COMM_WORLD_RANK", env("OMPI_COMM_WORLD_RANK"));
    w.world_size = parse_int("OMPI_COMM_WORLD_SIZE", env("OMPI_COMM_WORLD_SIZE"));
    w.local_rank = int_env("OMPI_COMM_WORLD_LOCAL_RANK", w.rank);
    w.local_world_size = int_env("OMPI_COMM_WORLD_LOCAL_SIZE", w.world_size);
    MT_CHECK(env("MASTER_ADDR") || w.local_world_size == w.world_size,
             "launch environment: an Open MPI job over several nodes needs MASTER_ADDR: run "
             "mpirun -x MASTER_ADDR=<first host> -x MASTER_PORT=<port> ...");
  } else {
    return w;  // one process: rank 0 of 1
  }
  if (const char* a = env("MASTER_ADDR")) w.master_addr = a;
  if (const char* p = env("MASTER_PORT")) w.master_port = parse_int("MASTER_PORT", p);
  read_roles(w);
  validate(w);
  return w;
}

Rendezvous rendezvous(const WorldInfo& world, const ProcessGroupOptions& options,
                      std::chrono::milliseconds report_every, const std::atomic<bool>* stop) {
  validate(world);
  Rendezvous rv;
  rv.world = world;
  TCPStoreOptions so;
  so.host = world.master_addr;
  // A single process needs nobody to find it: any free port, so it never clashes.
  so.port = world.world_size == 1 ? 0 : world.master_port;
  so.is_server = world.rank == 0;
  so.timeout = options.timeout;
  so.rank = world.rank;
  so.report_every = report_every;
  so.stop = stop;
  auto store = std::make_shared<TCPStore>(so);
  rv.store = store;

  // Check in, publishing our world size; rank 0's is the reference. The others read rank 0's
  // before they publish their own: rank 0 may give up (and take the store down) as soon as it
  // sees a mismatching key, so that key must be the last thing its owner needs from the store.
  const std::string ws = std::to_string(world.world_size);
  auto key = [](int r) { return "rendezvous/rank/" + std::to_string(r); };
  auto world_size_of = [&](int r) {
    const auto v = store->get(key(r));
    return std::string(v.begin(), v.end());
  };
  const std::string ref = world.rank == 0 ? ws : world_size_of(0);
  store->set(key(world.rank), std::vector<uint8_t>(ws.begin(), ws.end()));
  MT_CHECK(ref == ws, "rendezvous: rank ", world.rank, " was started with WORLD_SIZE=", ws,
           " but rank 0 with WORLD_SIZE=", ref, ": start every rank with the same world size");
  // Poll, remembering who has arrived, rather than one long blocking wait: when the deadline
  // passes every rank already knows which ranks are missing, without asking a store whose host
  // (rank 0) may be timing out and exiting at the same moment.
  std::vector<int> missing;
  for (int r = 0; r < world.world_size; ++r) missing.push_back(r);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options.timeout;
  auto waited = report_every;  // the next "waiting" line is due at start + waited
  for (;;) {
    std::vector<int> still;
    try {
      for (int r : missing)
        if (!store->check({key(r)})) still.push_back(r);
    } catch (const core::Error& e) {
      // The store's host (rank 0) gave up first; what we saw last is still the answer.
      MT_FAIL("rendezvous: rank ", world.rank, " was waiting for rank(s) ", rank_list(missing), " of ",
              world.world_size, " when the store went away (rank 0 timed out or exited): start "
              "every rank, with the same MASTER_ADDR/MASTER_PORT; store error: ", e.what());
    }
    missing.swap(still);
    if (missing.empty()) break;
    if (stop && stop->load())
      throw core::Interrupted("rendezvous: rank " + std::to_string(world.rank) + " stopped (a stop request) while "
                              "waiting for rank(s) " + rank_list(missing));
    MT_CHECK(std::chrono::steady_clock::now() < deadline, "rendezvous: rank ", world.rank,
             " timed out after ", options.timeout.count() / 1000.0, " s waiting for rank(s) ",
             rank_list(missing), " of ", world.world_size, " (store at ", world.master_addr, ":",
             store->port(), "): start them, or check that they use the same "
             "MASTER_ADDR/MASTER_PORT and can reach it");
    if (report_every.count() > 0 && std::chrono::steady_clock::now() >= start + waited) {
      std::fprintf(stderr, "rank %d: waiting for rank(s) %s at %s:%d, %s/%s s\n", world.rank,
                   rank_list(missing).c_str(), world.master_addr.c_str(), store->port(),
                   seconds_number(waited).c_str(), seconds_number(options.timeout).c_str());
      waited += report_every;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 1; r < world.world_size && world.rank == 0; ++r) {
    const std::string other = world_size_of(r);
    MT_CHECK(other == ws, "rendezvous: rank ", r, " was started with WORLD_SIZE=", other,
             " but rank 0 with WORLD_SIZE=", ws, ": start every rank with the same world size");
  }

  ProcessGroupOptions pg = options;
  if (pg.interface.empty() && pg.hostname.empty()) {
    // A one-machine job talks over loopback; across machines each rank binds the address that
    // reaches the master, not what this host's name resolves to (often nothing in containers).
    pg.hostname = is_loopback(world.master_addr) ? "127.0.0.1" : net::local_address_towards(world.master_addr);
    MT_CHECK_CONFIG(!pg.hostname.empty(), "rendezvous: rank ", world.rank, " found no local address that reaches "
                    "MASTER_ADDR ", world.master_addr, ": set dist.interface to the network interface to use");
  }
  rv.group = create_process_group(store, world.rank, world.world_size, pg);
  return rv;
}

}  // namespace mt::dist
