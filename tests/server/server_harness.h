#pragma once
// An ApiServer on 127.0.0.1 (free port) over a FakeEngine and FakeCodec, for the in-process server tests.
#include <functional>
#include <memory>

#include "fake_codec.h"
#include "fake_engine.h"
#include "server/api_server.h"

namespace fathom::testing {

class ServerHarness {
 public:
  explicit ServerHarness(FakeEngineOptions engine_options = {},
                         const std::function<void(server::ApiServerConfig&)>& adjust = nullptr)
      : engine(engine_options) {
    server::ApiServerConfig config;
    config.http.host = "127.0.0.1";
    config.http.port = 0;
    config.http.timeout_sweep_interval = std::chrono::milliseconds(50);
    config.served_model_name = "tiny";
    config.model_path = "/models/tiny";
    config.tokenizer_path = "/models/tiny";
    config.health_generate_timeout = std::chrono::milliseconds(2000);
    config.server_args = {{"page_size", 1}};
    config.enable_metrics = true;
    if (adjust) adjust(config);
    server = std::make_unique<server::ApiServer>(config, engine, std::make_shared<FakeCodec>());
    server->start();
  }
  ~ServerHarness() { server.reset(); }  // before the engine

  int port() const { return server->port(); }

  FakeEngine engine;
  std::unique_ptr<server::ApiServer> server;
};

}  // namespace fathom::testing
