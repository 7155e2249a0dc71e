// Layering of engine/: its folders form a strict order (docs/architecture.md, "Engine layers") and
// a folder may include only folders below it. Read from the sources at test time: every
// `#include "engine/<folder>/..."` line is an edge between folders. Fails on a folder-level cycle
// (printing the cycle with one file:line per edge) and on any include that points up the order
// (naming the file and line), so a new upward include is caught before it closes a cycle.
// Also who may include what from outside: ZeroMQ and msgpack headers only in kvscope_attach's
// sources (the engine links neither), and nothing from present/, cli/ or app/ (above the engine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_support.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

// Bottom-up: each folder may include itself and the folders before it. The same list, in the same
// order, is the numbered list under "Engine layers" in docs/architecture.md (checked below).
const std::vector<std::string> kEngineOrder = {
    "common", "kv",      "quant", "prefix", "tiers",    "trace", "model",  "mla",
    "sparse", "backend", "infer", "evict",  "analysis", "sched", "report", "scenario",
};

// Where a folder-level edge comes from: the first include line found for it.
struct IncludeSite {
  std::string file;  // relative to the source dir, e.g. "engine/kv/kv_storage.cpp"
  int line = 0;
  std::string where() const { return file + ":" + std::to_string(line); }
};

// from folder -> to folder -> one example include (self edges are left out).
using FolderGraph = std::map<std::string, std::map<std::string, IncludeSite>>;

// One `#include "engine/<to>/..."` line in a file of engine/<from>/ (from != to).
struct FolderInclude {
  std::string from;
  std::string to;
  IncludeSite site;
};

// Every folder under `root`/engine that holds a source file, every include between two of them,
// and the folder graph they make (the first include found is each edge's example).
struct EngineScan {
  std::set<std::string> folders;
  std::vector<FolderInclude> includes;
  FolderGraph graph;
};

bool is_source(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".h" || ext == ".hpp" || ext == ".cpp" || ext == ".cc" || ext == ".inc";
}

// The folder of an `#include "engine/<folder>/..."` (or <...>) line, or "" for any other line.
// Hand-parsed: GCC 12 warns falsely inside std::regex at -O2 with sanitizers (-Werror).
std::string included_engine_folder(const std::string& line) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return "";
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return "";
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || (line[i] != '"' && line[i] != '<')) return "";
  if (line.compare(i + 1, 7, "engine/") != 0) return "";
  const std::size_t begin = i + 8;
  std::size_t end = begin;
  while (end < line.size() &&
         (std::isalnum(static_cast<unsigned char>(line[end])) != 0 || line[end] == '_'))
    ++end;
  if (end == begin || end >= line.size() || line[end] != '/') return "";
  return line.substr(begin, end - begin);
}

EngineScan scan_engine(const fs::path& root) {
  EngineScan scan;
  const fs::path engine = root / "engine";
  if (!fs::is_directory(engine)) {
    ADD_FAILURE() << "no engine/ under " << root;
    return scan;
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(engine)) {
    if (entry.is_regular_file() && is_source(entry.path())) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // deterministic examples
  for (const fs::path& path : files) {
    const fs::path rel = fs::relative(path, engine);
    if (std::distance(rel.begin(), rel.end()) < 2) continue;  // a file directly in engine/
    const std::string from = rel.begin()->string();
    scan.folders.insert(from);
    std::ifstream in(path);
    std::string text;
    int line_no = 0;
    while (std::getline(in, text)) {
      ++line_no;
      const std::string to = included_engine_folder(text);
      if (to.empty() || to == from) continue;
      const IncludeSite site{fs::relative(path, root).string(), line_no};
      scan.includes.push_back({from, to, site});
      scan.graph[from].try_emplace(to, site);
    }
  }
  return scan;
}

// One cycle of `graph` as a folder path whose last entry equals its first ("kv", "model", "kv"),
// or none when the graph is acyclic. Depth-first, folders and edges in name order.
std::optional<std::vector<std::string>> find_cycle(const FolderGraph& graph) {
  enum class Mark { kNew, kOnStack, kDone };
  std::map<std::string, Mark> mark;
  std::vector<std::string> stack;
  std::optional<std::vector<std::string>> cycle;
  auto visit = [&](auto&& self, const std::string& node) -> void {
    mark[node] = Mark::kOnStack;
    stack.push_back(node);
    if (auto it = graph.find(node); it != graph.end()) {
      for (const auto& [next, site] : it->second) {
        if (cycle) return;
        const Mark m = mark.count(next) ? mark[next] : Mark::kNew;
        if (m == Mark::kOnStack) {
          auto start = std::find(stack.begin(), stack.end(), next);
          cycle.emplace(start, stack.end());
          cycle->push_back(next);
          return;
        }
        if (m == Mark::kNew) self(self, next);
      }
    }
    if (cycle) return;
    stack.pop_back();
    mark[node] = Mark::kDone;
  };
  for (const auto& [node, edges] : graph) {
    if (cycle) break;
    if (!mark.count(node)) visit(visit, node);
  }
  return cycle;
}

// "kv -> model -> kv" and one line per edge with the include that makes it.
std::string describe_cycle(const FolderGraph& graph, const std::vector<std::string>& cycle) {
  std::string out = "folder-level cycle: ";
  for (std::size_t i = 0; i < cycle.size(); ++i) out.append(i == 0 ? "" : " -> ").append(cycle[i]);
  for (std::size_t i = 0; i + 1 < cycle.size(); ++i) {
    const IncludeSite& site = graph.at(cycle[i]).at(cycle[i + 1]);
    out.append("\n  ").append(cycle[i]).append(" -> ").append(cycle[i + 1]).append("  ");
    out.append(site.where());
  }
  return out;
}

// Every violation of `order` (bottom-up): folders missing from it, and each include line of a
// folder that is not below the including one. Empty when the includes respect the order.
std::vector<std::string> order_violations(const EngineScan& scan,
                                          const std::vector<std::string>& order) {
  std::map<std::string, int> rank;
  for (std::size_t i = 0; i < order.size(); ++i) rank[order[i]] = static_cast<int>(i);
  std::vector<std::string> out;
  for (const std::string& folder : scan.folders) {
    if (!rank.count(folder)) {
      out.push_back(std::string("engine/").append(folder).append(
          "/ is not in the documented order (kEngineOrder, docs/architecture.md)"));
    }
  }
  for (const FolderInclude& inc : scan.includes) {
    if (!rank.count(inc.to)) {
      out.push_back(inc.site.where() + " includes unknown folder engine/" + inc.to + "/");
    } else if (rank.count(inc.from) && rank[inc.to] > rank[inc.from]) {
      out.push_back(inc.site.where() + " points up: engine/" + inc.from +
                    "/ may not include engine/" + inc.to +
                    "/ (above it in the order); move the shared piece down");
    }
  }
  return out;
}

// The numbered list ("1. `common/` ...") under "## Engine layers" in docs/architecture.md.
std::vector<std::string> documented_order(const std::string& doc) {
  std::vector<std::string> out;
  std::istringstream in(doc);
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Engine layers";
    if (!in_section) continue;
    // "<digits>. `<folder>/`"
    std::size_t i = 0;
    while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) != 0) ++i;
    if (i == 0 || line.compare(i, 3, ". `") != 0) continue;
    const std::size_t begin = i + 3, slash = line.find("/`", begin);
    if (slash == std::string::npos || slash == begin) continue;
    out.push_back(line.substr(begin, slash - begin));
  }
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out.append(s).append("\n");
  return out;
}

// The path an `#include "..."` or `#include <...>` line names ("" for any other line).
std::string included_path(const std::string& line) {
  std::size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos || line[i] != '#') return "";
  i = line.find_first_not_of(" \t", i + 1);
  if (i == std::string::npos || line.compare(i, 7, "include") != 0) return "";
  i = line.find_first_not_of(" \t", i + 7);
  if (i == std::string::npos || (line[i] != '"' && line[i] != '<')) return "";
  const std::size_t end = line.find(line[i] == '"' ? '"' : '>', i + 1);
  if (end == std::string::npos) return "";
  return line.substr(i + 1, end - i - 1);
}

// kvscope_attach's sources (engine/CMakeLists.txt): the only engine files that may include
// ZeroMQ or msgpack headers. kvscope_engine links neither library.
const std::set<std::string> kAttachLibrary = {"engine/trace/kv_event_client.cpp",
                                              "engine/trace/kv_event_stream.cpp",
                                              "engine/trace/kv_journal.cpp"};

// Every include under `root`/engine that the engine may not have: a ZeroMQ or msgpack header
// outside `attach_library`, or a header of present/, cli/ or app/ (the layers above the engine:
// the engine holds state, the words and JSON made from it live in present/).
std::vector<std::string> foreign_includes(const fs::path& root,
                                          const std::set<std::string>& attach_library) {
  std::vector<std::string> out;
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(root / "engine"))
    if (entry.is_regular_file() && is_source(entry.path())) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& path : files) {
    const std::string file = fs::relative(path, root).generic_string();
    std::ifstream in(path);
    std::string text;
    int line_no = 0;
    while (std::getline(in, text)) {
      ++line_no;
      const std::string inc = included_path(text);
      const std::string where = file + ":" + std::to_string(line_no) + " includes " + inc;
      const bool wire = inc.rfind("zmq", 0) == 0 || inc.rfind("msgpack", 0) == 0;
      if (wire && !attach_library.count(file))
        out.push_back(where + ": only kvscope_attach's sources may (ZeroMQ / msgpack)");
      for (const char* above : {"present/", "cli/", "app/"})
        if (inc.rfind(above, 0) == 0) out.push_back(where + ": above the engine");
    }
  }
  return out;
}

const EngineScan& source_scan() {
  static const EngineScan scan = scan_engine(KVSCOPE_SOURCE_DIR);
  return scan;
}

// The real tree.

TEST(EngineLayering, ScanSeesTheEngine) {
  const EngineScan& scan = source_scan();
  EXPECT_TRUE(scan.folders.count("common"));
  EXPECT_TRUE(scan.folders.count("scenario"));
  ASSERT_TRUE(scan.graph.count("kv"));
  EXPECT_TRUE(scan.graph.at("kv").count("common"));  // kv_storage.cpp includes common/config.h
}

TEST(EngineLayering, NoFolderLevelCycle) {
  const EngineScan& scan = source_scan();
  const auto cycle = find_cycle(scan.graph);
  EXPECT_FALSE(cycle.has_value()) << describe_cycle(scan.graph, *cycle);
}

TEST(EngineLayering, IncludesPointDownTheDocumentedOrder) {
  const std::vector<std::string> violations = order_violations(source_scan(), kEngineOrder);
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

TEST(EngineLayering, OrderIsTheOneInArchitectureDoc) {
  const std::string doc =
      test::read_text(std::string(KVSCOPE_SOURCE_DIR) + "/docs/architecture.md");
  EXPECT_EQ(documented_order(doc), kEngineOrder)
      << "docs/architecture.md (\"## Engine layers\") and kEngineOrder must list the same folders "
         "in the same order";
}

TEST(EngineLayering, OnlyTheAttachLibraryIncludesZeroMqOrMsgpack) {
  const std::vector<std::string> found = foreign_includes(KVSCOPE_SOURCE_DIR, kAttachLibrary);
  EXPECT_TRUE(found.empty()) << joined(found);
  // The check sees the includes it allows: the client's ZeroMQ, the decoder's msgpack.
  EXPECT_EQ(foreign_includes(KVSCOPE_SOURCE_DIR, {}).size(), 3u)
      << joined(foreign_includes(KVSCOPE_SOURCE_DIR, {}));
}

// The Scheduler is bookkeeping only: its own files include nothing that runs a model (the
// backend, the transformer, the token evictors); the StepExecutor does that.
TEST(EngineLayering, TheSchedulerIncludesNothingThatRunsAModel) {
  std::vector<std::string> found;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(KVSCOPE_SOURCE_DIR) / "engine/sched")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("scheduler", 0) != 0 || !is_source(entry.path())) continue;
    ++files;
    std::ifstream in(entry.path());
    std::string text;
    int line_no = 0;
    while (std::getline(in, text)) {
      ++line_no;
      const std::string inc = included_path(text);
      for (const char* runs : {"engine/backend/", "engine/infer/", "engine/evict/"})
        if (inc.rfind(runs, 0) == 0)
          found.push_back(name + ":" + std::to_string(line_no) + " " + inc);
    }
  }
  EXPECT_GE(files, 3);  // scheduler.h, scheduler.cpp, scheduler_prefix.cpp
  EXPECT_TRUE(found.empty()) << joined(found);
}

// The checker itself, on hand-made inputs: it must fail when there is something to fail on.

FolderGraph graph_of(const std::vector<std::pair<std::string, std::string>>& edges) {
  FolderGraph g;
  int line = 1;
  for (const auto& [from, to] : edges) {
    g[from][to] = IncludeSite{std::string("engine/").append(from).append("/x.h"), line++};
  }
  return g;
}

TEST(EngineLayeringCheck, FindsACycleWithItsIncludes) {
  const FolderGraph g = graph_of({{"a", "b"}, {"b", "c"}, {"c", "a"}, {"c", "d"}, {"d", "e"}});
  const auto cycle = find_cycle(g);
  ASSERT_TRUE(cycle.has_value());
  EXPECT_EQ(*cycle, (std::vector<std::string>{"a", "b", "c", "a"}));
  EXPECT_EQ(describe_cycle(g, *cycle),
            "folder-level cycle: a -> b -> c -> a\n"
            "  a -> b  engine/a/x.h:1\n"
            "  b -> c  engine/b/x.h:2\n"
            "  c -> a  engine/c/x.h:3");
}

TEST(EngineLayeringCheck, FindsATwoFolderCycleAwayFromTheFirstFolder) {
  const auto cycle = find_cycle(graph_of({{"a", "b"}, {"b", "c"}, {"c", "d"}, {"d", "c"}}));
  ASSERT_TRUE(cycle.has_value());
  EXPECT_EQ(*cycle, (std::vector<std::string>{"c", "d", "c"}));
}

TEST(EngineLayeringCheck, AcceptsADag) {
  // A diamond: d is reached twice, which is not a cycle.
  EXPECT_FALSE(find_cycle(graph_of({{"a", "b"}, {"a", "c"}, {"b", "d"}, {"c", "d"}})));
  EXPECT_FALSE(find_cycle(FolderGraph{}));
}

TEST(EngineLayeringCheck, NamesTheUpwardInclude) {
  EngineScan scan;
  scan.folders = {"low", "high"};
  scan.includes = {{"high", "low", {"engine/high/b.h", 3}},
                   {"low", "high", {"engine/low/a.cpp", 7}},
                   {"low", "high", {"engine/low/c.h", 9}}};
  const auto violations = order_violations(scan, {"low", "high"});
  ASSERT_EQ(violations.size(), 2u) << joined(violations);
  EXPECT_EQ(violations[0].rfind("engine/low/a.cpp:7 points up: engine/low/ may not include "
                                "engine/high/",
                                0),
            0u)
      << violations[0];
  EXPECT_EQ(violations[1].rfind("engine/low/c.h:9 points up", 0), 0u) << violations[1];
  EXPECT_TRUE(order_violations(scan, {"high", "low"}).size() == 1u);  // the other way round
  scan.folders.insert("new");
  EXPECT_EQ(order_violations(scan, {"low", "high"}).size(), 3u);
}

TEST(EngineLayeringCheck, ScansATreeWithACycle) {
  // A miniature engine/ on disk: low/a.cpp includes high/ (up), high/b.h includes low/ (down).
  const fs::path root = test::temp_path("layering_tree");
  fs::create_directories(root / "engine" / "low");
  fs::create_directories(root / "engine" / "high");
  std::ofstream(root / "engine" / "low" / "a.cpp") << "// low\n#include <vector>\n"
                                                      "#include \"engine/low/a.h\"\n"
                                                      "  #include \"engine/high/b.h\"\n";
  std::ofstream(root / "engine" / "high" / "b.h") << "#pragma once\n#include \"engine/low/a.h\"\n"
                                                     "// #include \"engine/nowhere/c.h\"\n";
  const EngineScan scan = scan_engine(root);
  EXPECT_EQ(scan.folders, (std::set<std::string>{"high", "low"}));
  const auto cycle = find_cycle(scan.graph);
  ASSERT_TRUE(cycle.has_value());
  EXPECT_EQ(describe_cycle(scan.graph, *cycle),
            "folder-level cycle: high -> low -> high\n"
            "  high -> low  engine/high/b.h:2\n"
            "  low -> high  engine/low/a.cpp:4");
  const auto violations = order_violations(scan, {"low", "high"});
  ASSERT_EQ(violations.size(), 1u) << joined(violations);
  EXPECT_EQ(violations[0].rfind("engine/low/a.cpp:4 points up", 0), 0u) << violations[0];
}

TEST(EngineLayeringCheck, NamesAForeignInclude) {
  const fs::path root = test::temp_path("layering_foreign");
  fs::create_directories(root / "engine" / "trace");
  std::ofstream(root / "engine" / "trace" / "client.cpp") << "#include <zmq.hpp>\n";
  std::ofstream(root / "engine" / "trace" / "model.cpp")
      << "// model\n#include <msgpack.hpp>\n#include \"present/attach_report.h\"\n"
         "#include <vector>\n";
  EXPECT_EQ(foreign_includes(root, {"engine/trace/client.cpp", "engine/trace/model.cpp"}),
            (std::vector<std::string>{
                "engine/trace/model.cpp:3 includes present/attach_report.h: above the engine"}));
  EXPECT_EQ(foreign_includes(root, {"engine/trace/model.cpp"}),
            (std::vector<std::string>{
                "engine/trace/client.cpp:1 includes zmq.hpp: only kvscope_attach's sources may "
                "(ZeroMQ / msgpack)",
                "engine/trace/model.cpp:3 includes present/attach_report.h: above the engine"}));
  EXPECT_EQ(foreign_includes(root, {}).size(), 3u);
  EXPECT_EQ(included_path("  #  include <zmq.h>"), "zmq.h");
  EXPECT_EQ(included_path("// #include <zmq.h>"), "");
}

}  // namespace
}  // namespace kvscope
