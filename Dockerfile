# opshooks image: build with cargo, ship the binary alone on a slim base
# that runs it as a non-root user.
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked && strip target/release/opshooks

FROM debian:bookworm-slim
RUN groupadd --gid 65532 opshooks && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin opshooks
COPY --from=build /src/target/release/opshooks /usr/local/bin/opshooks
USER 65532:65532
EXPOSE 8080
ENV OPSHOOKS_LISTEN=0.0.0.0:8080 OPSHOOKS_LOG_FORMAT=json
ENTRYPOINT ["/usr/local/bin/opshooks"]
