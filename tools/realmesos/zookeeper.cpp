// ZooKeeper leader election for realmesos-cluster (REALMESOS_ZK=zk://host:port/path).
//
// local::launch (src/local/local.cpp) always gives its master a StandaloneMasterContender
// and its master and agents one StandaloneMasterDetector, so MESOS_ZK does nothing there.
// libmesos reaches both classes' vtables through its GOT, and this program (linked with
// -rdynamic) defines those vtable symbols itself: the dynamic linker binds libmesos' objects
// to the tables here. They start as copies of libmesos' own; with REALMESOS_ZK set, the
// contender's initialize() and contend() and the detector's detect() are replaced by calls to
// the ZooKeeper contender and detector that MasterContender::create and MasterDetector::create
// make for that URL, as mesos-master and mesos-agent make them. Several clusters on one
// ZooKeeper path then elect one leading master among them, and every cluster's agents follow
// the leader, as on a production cluster.

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "abi.hpp"

// What the dynamic linker binds libmesos' references to (offset to top, typeinfo, D1, D0,
// then the virtual functions in declaration order: contender initialize, contend; detector
// detect).
extern "C" {
void* _ZTVN5mesos6master9contender25StandaloneMasterContenderE[6];
void* _ZTVN5mesos6master8detector24StandaloneMasterDetectorE[6];
}

namespace {

constexpr int CONTENDER_INITIALIZE = 4, CONTENDER_CONTEND = 5, DETECTOR_DETECT = 4;

void* zkContender = nullptr;
void* zkDetector = nullptr;

void** vptr(void* object)
{
    return *static_cast<void***>(object);
}

// Member functions returning a process::Future (not trivially copyable) take the address of
// the result first, then `this`, then their arguments. The vtable's slots here are offset by
// the two header words: vptr[n - 2].
void initialize(void* /*standalone*/, const void* masterInfo)
{
    using Fn = void (*)(void*, const void*);
    reinterpret_cast<Fn>(vptr(zkContender)[CONTENDER_INITIALIZE - 2])(zkContender, masterInfo);
}

void* contend(void* result, void* /*standalone*/)
{
    using Fn = void* (*)(void*, void*);
    return reinterpret_cast<Fn>(vptr(zkContender)[CONTENDER_CONTEND - 2])(result, zkContender);
}

void* detect(void* result, void* /*standalone*/, const void* previous)
{
    using Fn = void* (*)(void*, void*, const void*);
    return reinterpret_cast<Fn>(vptr(zkDetector)[DETECTOR_DETECT - 2])(result, zkDetector, previous);
}

void* made(const TryPointer& made, const char* what)
{
    if (made.error_state == 0) {
        std::fprintf(stderr, "realmesos: no ZooKeeper %s: %s\n", what, made.message()->c_str());
        std::_Exit(2);
    }
    return made.value;
}

const char* zookeeperUrl()
{
    const char* url = std::getenv("REALMESOS_ZK");
    return url != nullptr && *url != '\0' ? url : nullptr;
}

// Before main: the tables must be whole before libmesos' constructors run any code that
// could build a standalone contender or detector.
__attribute__((constructor)) void copyTables()
{
    void* libmesos = dlopen("libmesos-1.11.0.so", RTLD_NOW | RTLD_NOLOAD);
    void* contender = libmesos ? dlsym(libmesos, "_ZTVN5mesos6master9contender25StandaloneMasterContenderE") : nullptr;
    void* detector = libmesos ? dlsym(libmesos, "_ZTVN5mesos6master8detector24StandaloneMasterDetectorE") : nullptr;
    if (contender == nullptr || detector == nullptr) {
        std::fprintf(stderr, "realmesos: libmesos' standalone contender or detector not found\n");
        std::_Exit(2);
    }
    std::memcpy(_ZTVN5mesos6master9contender25StandaloneMasterContenderE, contender, sizeof(void*) * 6);
    std::memcpy(_ZTVN5mesos6master8detector24StandaloneMasterDetectorE, detector, sizeof(void*) * 6);
}

}  // namespace

void useZooKeeper()
{
    const char* url = zookeeperUrl();
    if (url == nullptr) {
        return;
    }
    Option<std::string> zk{std::string(url)};
    Option<std::string> noModule;
    Option<Duration> defaultTimeout;
    zkContender = made(mesos::master::contender::MasterContender::create(zk, noModule, defaultTimeout), "contender");
    zkDetector = made(mesos::master::detector::MasterDetector::create(zk, noModule, defaultTimeout), "detector");
    _ZTVN5mesos6master9contender25StandaloneMasterContenderE[CONTENDER_INITIALIZE] = reinterpret_cast<void*>(initialize);
    _ZTVN5mesos6master9contender25StandaloneMasterContenderE[CONTENDER_CONTEND] = reinterpret_cast<void*>(contend);
    _ZTVN5mesos6master8detector24StandaloneMasterDetectorE[DETECTOR_DETECT] = reinterpret_cast<void*>(detect);
    std::fprintf(stderr, "realmesos: leader election in ZooKeeper at %s\n", url);
}
