// Hand-written declarations of the few libmesos 1.11.0 entry points the launchers call (the
// shared object of the mesos.scheduler tarball exports them; no Mesos headers are needed).
// Only names, parameter types and, where an object is built in place, sizes and offsets
// matter: they must mangle and lay out as upstream's do.
#pragma once

#include <new>
#include <string>

// stout's Option<T> (3rdparty/stout/include/stout/option.hpp): an enum state, then the value.
template <typename T>
class Option
{
public:
    Option() : state(NONE) {}
    Option(const T& value) : state(SOME) { new (&t) T(value); }
    ~Option()
    {
        if (state == SOME) {
            t.~T();
        }
    }

private:
    enum State { SOME, NONE };
    State state;
    union {
        T t;
    };
};

// stout's Try<flags::Warnings>: Option<Warnings> (a vector), then Option<Error> (a string).
// Returned by value through a hidden pointer (it is not trivially copyable), so this type
// must not be trivial either; its contents are read, never destroyed (the program exits).
struct LoadResult
{
    int data_state;
    void* warnings[3];
    int error_state;  // 0: an error, whose message follows
    std::string* message() { return reinterpret_cast<std::string*>(&error_message); }
    alignas(std::string) unsigned char error_message[sizeof(std::string)];
    ~LoadResult() {}
};

// stout's Duration: nanoseconds.
class Duration
{
    long long nanos;
};

// stout's Try<T*>: Option<T*>, then Option<Error> (a string); as LoadResult, returned through a
// hidden pointer and never destroyed.
struct TryPointer
{
    int data_state;
    void* value;
    int error_state;  // 0: an error, whose message follows
    const std::string* message() const { return reinterpret_cast<const std::string*>(&error_message); }
    alignas(std::string) unsigned char error_message[sizeof(std::string)];
    ~TryPointer() {}
};

namespace flags {
class FlagsBase
{
public:
    LoadResult load(
        const Option<std::string>& prefix,
        int argc,
        const char* const* argv,
        bool unknowns,
        bool duplicates);
};
}  // namespace flags

namespace process {
bool initialize(
    const Option<std::string>& delegate,
    const Option<std::string>& readwriteAuthenticationRealm,
    const Option<std::string>& readonlyAuthenticationRealm);
}  // namespace process

namespace mesos {
class Scheduler;

class FrameworkInfo
{
public:
    FrameworkInfo();
};

class MesosSchedulerDriver
{
public:
    MesosSchedulerDriver(Scheduler* scheduler, const FrameworkInfo& framework, const std::string& master);
};

namespace master {
namespace contender {
class MasterContender
{
public:
    static TryPointer create(
        const Option<std::string>& zk,
        const Option<std::string>& masterContenderModule,
        const Option<Duration>& zkSessionTimeout);
};
}  // namespace contender

namespace detector {
class MasterDetector
{
public:
    static TryPointer create(
        const Option<std::string>& zk,
        const Option<std::string>& masterDetectorModule,
        const Option<Duration>& zkSessionTimeout);
};
}  // namespace detector
}  // namespace master

namespace internal {
namespace local {
void shutdown();
}  // namespace local

namespace slave {
// src/slave/containerizer/mesos/launch.hpp: a Subcommand (vtable, name, empty FlagsBase:
// 0xe0 bytes) followed by its Flags, whose virtual FlagsBase base (0xb8 bytes: vtable, help,
// programName_, usageMessage_, flags_, aliases) sits 0x88 further, at 0x168 (what the
// exported getFlags() returns).
class MesosContainerizerLaunch
{
public:
    class Flags
    {
    public:
        Flags();
    };
    int execute();
    flags::FlagsBase* getFlags();
};

// src/slave/containerizer/mesos/isolators/network/cni/cni.hpp: the same layout (its Flags at
// 0xe0 too; their virtual FlagsBase 0xe0 further, at 0x1c0, as its getFlags() returns).
class NetworkCniIsolatorSetup
{
public:
    class Flags
    {
    public:
        Flags();
    };
    int execute();
    flags::FlagsBase* getFlags();
};
}  // namespace slave
}  // namespace internal
}  // namespace mesos

// Room for upstream's objects built in place (each is far smaller).
constexpr std::size_t ROOM = 1 << 16;
constexpr std::size_t SUBCOMMAND_FLAGS_OFFSET = 0xe0;  // sizeof(Subcommand)
