# The aileron-proxy server image. Build the static binary on the host first
# (CI reaches no container registry, so there is no Go builder stage):
#
#   CGO_ENABLED=0 go build -o bin/aileron-proxy ./cmd/aileron-proxy
#   docker build -t aileron/aileron-proxy:dev .
#
# Run it with a state volume; listen on all interfaces inside the container:
#
#   docker run -v aileron-home:/var/lib/aileron -p 3128:3128 -p 7700:7700 \
#     aileron/aileron-proxy:dev serve --proxy-listen 0.0.0.0:3128 --api-listen 0.0.0.0:7700
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/aileron --create-home aileron
COPY bin/aileron-proxy /usr/local/bin/aileron-proxy
USER aileron
ENV AILERON_HOME=/var/lib/aileron
EXPOSE 3128 7700
ENTRYPOINT ["/usr/local/bin/aileron-proxy"]
CMD ["serve"]
