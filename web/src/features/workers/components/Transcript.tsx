// A finished run's transcript as one linear sequence of steps (see
// components/Step.tsx). Virtualised: thousands of steps render only what is
// on screen.
import { useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { TranscriptStep } from "@/api/types";
import { Step } from "@/components/Step";

export function Transcript({ steps }: { steps: TranscriptStep[] }) {
  const scrollRef = useRef<HTMLDivElement>(null);
  const virtualizer = useVirtualizer({
    count: steps.length,
    getScrollElement: () => scrollRef.current,
    estimateSize: () => 64,
    overscan: 6,
  });
  return (
    <div className="transcript" ref={scrollRef} data-testid="transcript" data-steps={steps.length} tabIndex={0} aria-label="Transcript">
      <div style={{ height: virtualizer.getTotalSize(), position: "relative" }}>
        {virtualizer.getVirtualItems().map((item) => (
          <div
            key={item.key}
            data-index={item.index}
            ref={virtualizer.measureElement}
            className="step"
            style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${item.start}px)` }}
          >
            <Step step={steps[item.index]} />
          </div>
        ))}
      </div>
    </div>
  );
}
